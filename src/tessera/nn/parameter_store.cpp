#include "tessera/nn/parameter_store.h"

#include <cstring>

#include "tessera/core/rng.h"

namespace tessera::nn {

Sharding Sharding::split(int axis, int64_t global_size, int parts, int part) {
  TESSERA_CHECK(parts >= 1 && part >= 0 && part < parts, "Sharding::split: part ", part, " of ", parts);
  TESSERA_CHECK(global_size % parts == 0, "Sharding::split: size ", global_size, " not divisible into ", parts,
                " equal parts");
  Sharding s;
  if (parts == 1) return s;  // one part is the whole tensor: replicated
  s.split_axis = axis;
  s.split_offset = global_size / parts * part;
  s.global_axis_size = global_size;
  return s;
}

int ParameterStore::add(std::string name, Shape shape, Init init, double init_std, bool weight_decay,
                        const Sharding& sharding) {
  TESSERA_CHECK(!allocated_, "parameter ", name, " registered after allocate()");
  TESSERA_CHECK(index_of(name) < 0, "parameter ", name, " registered twice");
  Parameter p;
  p.name = std::move(name);
  p.offset = static_cast<size_t>(numel_);
  numel_ += shape_numel(shape);
  p.global_shape = shape;
  if (sharding.split_axis >= 0) {
    int axis = sharding.split_axis;
    TESSERA_CHECK(axis < static_cast<int>(shape.size()), "parameter ", p.name, ": split axis ", axis,
                  " outside its shape ", shape_string(shape));
    TESSERA_CHECK(sharding.split_offset >= 0 && sharding.split_offset + shape[axis] <= sharding.global_axis_size,
                  "parameter ", p.name, ": slice [", sharding.split_offset, ", ", sharding.split_offset + shape[axis],
                  ") outside the global axis of size ", sharding.global_axis_size);
    p.global_shape[axis] = sharding.global_axis_size;
    p.split_axis = axis;
    p.split_offset = sharding.split_offset;
  }
  p.sequence_parallel = sharding.sequence_parallel;
  p.shape = std::move(shape);
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void ParameterStore::allocate(DType dtype, Device device) {
  TESSERA_CHECK(!allocated_, "ParameterStore::allocate() called twice");
  dtype_ = dtype;
  device_ = device;
  size_t bytes = static_cast<size_t>(numel_) * dtype_size(dtype);
  values_ = Buffer(bytes, device);
  grads_ = Buffer(bytes, device);
  for (auto& p : params_) {
    size_t byte_offset = p.offset * dtype_size(dtype);
    p.value = values_.as_tensor(dtype, p.shape, byte_offset);
    p.grad = grads_.as_tensor(dtype, p.shape, byte_offset);
  }
  allocated_ = true;
}

// The index in the global tensor of local element i (row-major, slice along split_axis).
static uint64_t global_index(const Parameter& p, int64_t i) {
  if (p.split_axis < 0) return static_cast<uint64_t>(i);
  int64_t inner = 1;
  for (size_t a = static_cast<size_t>(p.split_axis) + 1; a < p.shape.size(); ++a) inner *= p.shape[a];
  int64_t local_axis = p.shape[static_cast<size_t>(p.split_axis)];
  int64_t global_axis = p.global_shape[static_cast<size_t>(p.split_axis)];
  int64_t outer = i / (local_axis * inner), k = i / inner % local_axis, in = i % inner;
  return static_cast<uint64_t>((outer * global_axis + p.split_offset + k) * inner + in);
}

template <typename T>
static void draw(const Parameter& p, uint64_t seed) {
  T* out = p.value.data_as<T>();
  int64_t n = p.value.numel();
  RandomStream stream(seed, stream_id(p.name));
  for (int64_t i = 0; i < n; ++i) {
    switch (p.init) {
      case Init::normal: out[i] = static_cast<T>(p.init_std * stream.normal(global_index(p, i))); break;
      case Init::zeros: out[i] = T(0); break;
      case Init::ones: out[i] = T(1); break;
    }
  }
}

void ParameterStore::initialize(uint64_t seed) {
  TESSERA_CHECK(allocated_ && device_.is_cpu(), "initialize() needs allocated CPU parameters");
  for (const auto& p : params_) {
    if (dtype_ == DType::f32) draw<float>(p, seed);
    else if (dtype_ == DType::f64) draw<double>(p, seed);
    else TESSERA_FAIL("initialize(): unsupported parameter dtype ", dtype_name(dtype_));
  }
}

const Parameter& ParameterStore::find(const std::string& name) const {
  int i = index_of(name);
  if (i < 0) TESSERA_FAIL("no parameter named '", name, "'");
  return params_[i];
}

int ParameterStore::index_of(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return static_cast<int>(i);
  return -1;
}

int64_t ParameterStore::global_numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += shape_numel(p.global_shape);
  return n;
}

void ParameterStore::zero_grads() {
  if (grads_.size() == 0) return;
  if (device_.is_cpu()) std::memset(grads_.data(), 0, grads_.size());
  else device_memset_zero(grads_.data(), grads_.size(), device_);
}

}  // namespace tessera::nn
