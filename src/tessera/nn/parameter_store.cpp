#include "tessera/nn/parameter_store.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/ops/elementwise.h"

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

std::vector<int> ParameterStore::tied_embeddings() const {
  std::vector<int> indices;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].roles.tied_embedding) indices.push_back(static_cast<int>(i));
  return indices;
}

void ParameterStore::allocate(DType dtype, Device device) {
  TESSERA_CHECK(!allocated_, "ParameterStore::allocate() called twice");
  dtype_ = dtype;
  device_ = device;
  grad_dtype_ = device.is_cuda() && (dtype == DType::bf16 || dtype == DType::f16) ? DType::f32 : dtype;
  values_ = Buffer(static_cast<size_t>(numel_) * dtype_size(dtype), device);
  grads_ = Buffer(static_cast<size_t>(numel_) * dtype_size(grad_dtype_), device);
  for (auto& p : params_) {
    p.value = values_.as_tensor(dtype, p.shape, p.offset * dtype_size(dtype));
    p.grad = grads_.as_tensor(grad_dtype_, p.shape, p.offset * dtype_size(grad_dtype_));
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

// Draws elements [begin, end) of parameter p into out_tensor (a pure function of the index).
template <typename T>
static void draw(const Parameter& p, const Tensor& out_tensor, uint64_t seed, int64_t begin, int64_t end) {
  T* out = out_tensor.data_as<T>();
  RandomStream stream(seed, stream_id(p.name));
  for (int64_t i = begin; i < end; ++i) {
    switch (p.init) {
      case Init::normal: out[i] = static_cast<T>(p.init_std * stream.normal(global_index(p, i))); break;
      case Init::zeros: out[i] = T(0); break;
      case Init::ones: out[i] = T(1); break;
    }
  }
}

void ParameterStore::initialize(uint64_t seed) {
  TESSERA_CHECK(allocated_, "initialize() needs allocated parameters");
  TESSERA_CHECK(dtype_ == DType::f32 || dtype_ == DType::f64 || dtype_ == DType::bf16 || dtype_ == DType::f16,
                "initialize(): unsupported parameter dtype ", dtype_name(dtype_), " (allowed: f32, f64, bf16, f16)");
  // Draw on the host in f64 (f64 stores) or f32 (all others: a bf16 / f16 model is the f32
  // initialisation rounded once), then copy or convert into the store's buffer on its device.
  const DType draw_dtype = dtype_ == DType::f64 ? DType::f64 : DType::f32;
  const bool direct = device_.is_cpu() && draw_dtype == dtype_;
  Buffer host(direct ? 0 : static_cast<size_t>(numel_) * dtype_size(draw_dtype));
  const Tensor drawn_all = direct ? all_values() : host.as_tensor(draw_dtype, {numel_});
  // Every element is a pure function of (seed, name, index): threads draw interleaved chunks.
  const int64_t chunk = int64_t{1} << 20;
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
  auto worker = [&](unsigned t) {
    int64_t k = 0;
    for (const auto& p : params_) {
      const Tensor out = drawn_all.flat().rows(static_cast<int64_t>(p.offset), static_cast<int64_t>(p.offset) + p.value.numel());
      for (int64_t begin = 0; begin < out.numel(); begin += chunk, ++k) {
        if (k % threads != t) continue;
        const int64_t end = std::min(out.numel(), begin + chunk);
        if (draw_dtype == DType::f64) draw<double>(p, out, seed, begin, end);
        else draw<float>(p, out, seed, begin, end);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& thread : pool) thread.join();
  if (direct) return;
  if (device_.is_cpu() || draw_dtype == dtype_) {
    ops::copy(drawn_all, all_values());  // host conversion, or an upload of equal dtypes
    return;
  }
  Buffer staged(host.size(), device_);  // upload, then convert on the device
  const Tensor staged_all = staged.as_tensor(draw_dtype, {numel_});
  ops::copy(drawn_all, staged_all);
  ops::copy(staged_all, all_values());
  ops::synchronize(device_);  // the staging buffer is freed on return
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
  const Tensor all = all_grads();
  if (all.nbytes() == 0) return;
  if (device_.is_cpu()) std::memset(all.data(), 0, all.nbytes());
  else device_memset_zero(all.data(), all.nbytes(), device_);
}

void ParameterStore::use_external_grads(const Tensor& all, const std::vector<Tensor>& grads) {
  TESSERA_CHECK(allocated_, "ParameterStore::use_external_grads() before allocate()");
  TESSERA_CHECK(grad_dtype_ == DType::f32 && all.dtype() == DType::f32 && all.device() == device_,
                "ParameterStore::use_external_grads: needs f32 gradients on ", device_.name(), ", got store gradients ",
                dtype_name(grad_dtype_), " and external ", all.describe());
  TESSERA_CHECK(grads.size() == params_.size(), "ParameterStore::use_external_grads: ", grads.size(),
                " views for ", params_.size(), " parameters");
  const auto* begin = static_cast<const char*>(all.data());
  const auto* end = begin + all.nbytes();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = grads[i];
    const auto* first = static_cast<const char*>(g.data());
    TESSERA_CHECK(g.dtype() == DType::f32 && g.shape() == params_[i].shape && first >= begin &&
                      first + g.nbytes() <= end,
                  "ParameterStore::use_external_grads: the view of '", params_[i].name, "' (", g.describe(),
                  ") is not an f32 ", shape_string(params_[i].shape), " inside the external buffer");
  }
  for (size_t i = 0; i < params_.size(); ++i) params_[i].grad = grads[i];
  external_grads_ = all;
  grads_ = Buffer();
}

}  // namespace tessera::nn
