// ParameterStore: every parameter of a model as a view into one contiguous value buffer, with its
// gradient a view into one contiguous gradient buffer (Megatron's main_grad), in registration
// order. Initialisation draws element i of parameter NAME from Philox(seed, stream_id(NAME), i),
// so the global weights are the same whatever the parallel layout.
#pragma once
#include <string>
#include <vector>

#include "tessera/core/buffer.h"

namespace tessera::nn {

enum class Init { normal, zeros, ones };

struct Parameter {
  std::string name;   // "layers.0.self_attention.linear_qkv.weight"
  Shape shape;
  Init init = Init::normal;
  double init_std = 0.02;
  bool weight_decay = true;  // false for biases and norm weights
  size_t offset = 0;         // element offset in the value and gradient buffers
  Tensor value;
  Tensor grad;
};

class ParameterStore {
 public:
  // Registers a parameter (before allocate()); returns its index.
  int add(std::string name, Shape shape, Init init, double init_std, bool weight_decay);
  void allocate(DType dtype, Device device);  // both buffers, zero-filled
  void initialize(uint64_t seed);             // draws every parameter as registered (CPU buffers)

  const Tensor& value(int index) const { return params_.at(index).value; }
  const Tensor& grad(int index) const { return params_.at(index).grad; }
  const std::vector<Parameter>& parameters() const { return params_; }
  const Parameter& find(const std::string& name) const;  // throws naming the missing parameter
  int index_of(const std::string& name) const;           // -1 when absent

  Tensor all_values() const { return values_.as_tensor(dtype_, {numel_}); }
  Tensor all_grads() const { return grads_.as_tensor(dtype_, {numel_}); }
  void zero_grads();
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

 private:
  std::vector<Parameter> params_;
  Buffer values_;
  Buffer grads_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
  bool allocated_ = false;
};

}  // namespace tessera::nn
