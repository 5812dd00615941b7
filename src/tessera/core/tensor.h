// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, shape, device). Memory is
// owned by a Buffer or an Arena (buffer.h); views are cheap to copy and never free anything.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string name() const;
};

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::cpu());

  bool defined() const { return data_ != nullptr || numel() == 0; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    TESSERA_CHECK(dtype_ == dtype_of<T>(), "tensor of dtype ", dtype_name(dtype_), " read as ",
                  dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  Tensor view(Shape shape) const;                     // same elements, new shape
  Tensor rows(int64_t begin, int64_t end) const;      // [begin, end) along axis 0
  Tensor flat() const { return view({numel()}); }     // 1-D view
  std::string describe() const;                       // "f32[2, 3] on cpu"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
  Device device_;
};

// Throws a check error unless the tensor has this dtype and shape (the name goes into the message).
void expect_tensor(const Tensor& t, DType dtype, const Shape& shape, const char* name);
void expect_same_shape(const Tensor& a, const Tensor& b, const char* what);

}  // namespace tessera
