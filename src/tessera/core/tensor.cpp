#include "tessera/core/tensor.h"

#include <sstream>

namespace tessera {

std::string Device::name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

Tensor::Tensor(void* data, DType dtype, Shape shape, Device device)
    : data_(data), dtype_(dtype), shape_(std::move(shape)), device_(device) {
  for (int64_t d : shape_) TESSERA_CHECK(d >= 0, "negative dimension in shape ", shape_string(shape_));
}

int64_t Tensor::dim(int axis) const {
  int n = ndim();
  int a = axis < 0 ? axis + n : axis;
  TESSERA_CHECK(a >= 0 && a < n, "axis ", axis, " out of range for ", describe());
  return shape_[a];
}

Tensor Tensor::view(Shape shape) const {
  TESSERA_CHECK(shape_numel(shape) == numel(), "cannot view ", describe(), " as ", shape_string(shape));
  return Tensor(data_, dtype_, std::move(shape), device_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  TESSERA_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [", begin, ", ", end,
                ") out of range for ", describe());
  Shape shape = shape_;
  shape[0] = end - begin;
  int64_t row_elems = shape_[0] ? numel() / shape_[0] : 0;
  auto* base = static_cast<char*>(data_) + static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  return Tensor(base, dtype_, std::move(shape), device_);
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_string(shape_) + " on " + device_.name();
}

void expect_tensor(const Tensor& t, DType dtype, const Shape& shape, const char* name) {
  if (t.dtype() != dtype || t.shape() != shape)
    TESSERA_FAIL(name, ": expected ", dtype_name(dtype), shape_string(shape), ", got ", t.describe());
}

void expect_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  if (a.shape() != b.shape()) TESSERA_FAIL(what, ": shapes differ: ", a.describe(), " vs ", b.describe());
}

}  // namespace tessera
