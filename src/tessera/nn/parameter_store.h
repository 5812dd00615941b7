// ParameterStore: every parameter of a model as a view into one contiguous value buffer, with its
// gradient a view into one contiguous gradient buffer (Megatron's main_grad), in registration
// order. Initialisation draws element i of parameter NAME from Philox(seed, stream_id(NAME), i),
// i the element's index in the *global* (unsplit) tensor, so the global weights are the same
// whatever the parallel layout. Each parameter records its global shape and how this rank's slice
// sits in it (split axis and offset): the metadata for gathering and resharding checkpoints.
#pragma once
#include <string>
#include <vector>

#include "tessera/core/buffer.h"

namespace tessera::nn {

enum class Init { normal, zeros, ones };

// How a tensor-parallel rank holds a parameter: replicated (split_axis = -1) or the contiguous
// slice [split_offset, split_offset + local size) along split_axis of the global tensor.
struct Sharding {
  int split_axis = -1;
  int64_t split_offset = 0;
  int64_t global_axis_size = 0;  // the global size along split_axis
  // Replicated, but under sequence parallelism each rank's gradient is a partial sum over its
  // tokens, so the grads are all-reduced over TP (LayerNorm params, row-parallel biases).
  bool sequence_parallel = false;
  // Part `part` of `parts` equal parts of a global axis of size global_size (which parts divides).
  static Sharding split(int axis, int64_t global_size, int parts, int part);
};

// The data-parallel group that reduces a parameter's gradient: the data group (dense parameters)
// or, for mixture-of-experts experts (nn/moe_layer.h), the expert-data group (distributed/grad_buffer.h).
enum class ReduceGroup { data, expert_data };

// What a parameter is beyond its layer, set at registration (by the layer, or by the model for
// tying), so that pipeline schedules, optimizers and checkpoint code never look at names.
struct ParameterRoles {
  // The input embedding tied to the output layer: the embedding itself on the first stage, its
  // copy on the last (pipeline parallelism); gradients summed over the embedding group.
  bool tied_embedding = false;
  // Non-empty: this parameter is a copy of that one (the last stage's tied output layer): counted
  // once in grad norms and FLOPs, loaded from it when a checkpoint does not hold the copy.
  std::string copy_of;
  bool position_embedding = false;  // a learned position table (not counted in the FLOPs)
  int vocab_axis = -1;  // the axis of (padded) vocabulary rows: checkpoints resize it across paddings
  ReduceGroup reduce_group = ReduceGroup::data;
};

struct Parameter {
  std::string name;   // "layers.0.self_attention.linear_qkv.weight"
  Shape shape;          // this rank's (local) shape
  Shape global_shape;   // the unsplit tensor's shape (== shape when replicated)
  int split_axis = -1;  // -1: replicated on every tensor-parallel rank
  int64_t split_offset = 0;  // start of this rank's slice along split_axis, in global elements
  bool sequence_parallel = false;  // see Sharding::sequence_parallel
  Init init = Init::normal;
  double init_std = 0.02;
  bool weight_decay = true;  // false for biases and norm weights
  ParameterRoles roles;
  size_t offset = 0;         // element offset in the value and gradient buffers
  Tensor value;
  Tensor grad;
};

class ParameterStore {
 public:
  // Registers a parameter (before allocate()); returns its index.
  // shape is the local shape; with a split, the global shape has sharding.global_axis_size there.
  int add(std::string name, Shape shape, Init init, double init_std, bool weight_decay,
          const Sharding& sharding = {});
  void allocate(DType dtype, Device device);  // both buffers, zero-filled
  void initialize(uint64_t seed);             // draws every parameter as registered (CPU buffers)

  const Tensor& value(int index) const { return params_.at(index).value; }
  const Tensor& grad(int index) const { return params_.at(index).grad; }
  const std::vector<Parameter>& parameters() const { return params_; }
  const Parameter& find(const std::string& name) const;  // throws naming the missing parameter
  int index_of(const std::string& name) const;           // -1 when absent
  ParameterRoles& roles(int index) { return params_.at(index).roles; }  // set at registration
  // The parameters with roles.tied_embedding on this rank (none, or one per stage holding it).
  std::vector<int> tied_embeddings() const;

  Tensor all_values() const { return values_.as_tensor(dtype_, {numel_}); }
  // Every gradient: the store's own buffer [numel], or the external memory of use_external_grads().
  Tensor all_grads() const {
    return external_grads_.defined() ? external_grads_ : grads_.as_tensor(grad_dtype_, {numel_});
  }
  void zero_grads();  // clears all_grads() (an external buffer's padding too)
  // Points every parameter's gradient into f32 memory laid out by the caller (the data-parallel
  // gradient buffer, distributed/grad_buffer.h), so the main gradients exist once rather than twice,
  // and frees the store's own gradient buffer. `all` spans every view (padding included; it is what
  // zero_grads() clears); grads[i] is parameter i's view, shaped like it. The caller keeps the memory
  // alive while the store's gradients are used.
  void use_external_grads(const Tensor& all, const std::vector<Tensor>& grads);
  bool has_external_grads() const { return external_grads_.defined(); }
  int64_t numel() const { return numel_; }      // elements on this rank
  int64_t global_numel() const;                  // elements of the unsplit model (this rank's parameters)
  DType dtype() const { return dtype_; }
  // The gradients' dtype: f32 main grads for bf16 / f16 parameters on a GPU (the CUDA GEMMs and
  // kernels accumulate into fp32, Megatron's gradient-accumulation fusion), else the parameter dtype.
  DType grad_dtype() const { return grad_dtype_; }
  Device device() const { return device_; }

 private:
  std::vector<Parameter> params_;
  Buffer values_;
  Buffer grads_;
  Tensor external_grads_;  // set by use_external_grads(); grads_ is then empty
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  DType grad_dtype_ = DType::f32;
  Device device_;
  bool allocated_ = false;
};

}  // namespace tessera::nn
