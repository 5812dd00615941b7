// GradBuffer: Megatron's contiguous fp32 main-gradient buffer for data parallelism. Parameters are
// laid out in reverse registration order (about backprop order) and grouped into buckets, each
// bucket reduced over DP as one collective; with the distributed optimizer each parameter starts on
// a multiple of 64 elements and each bucket is padded to a multiple of lcm(dp, 128) so that it
// splits into dp equal shards (spec 7.1).
#pragma once
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"
#include "tessera/ops/multi_tensor.h"

namespace tessera::parallel {

struct GradBufferOptions {
  int data_parallel_size = 1;
  bool pad_for_sharding = false;  // the distributed optimizer layout (64-element starts, lcm(dp,128) bucket ends)
  int64_t bucket_size = 0;        // elements; 0: one bucket for every parameter (Megatron without overlap)
  // Parameters that get a bucket of their own (the tied word embedding when pp > 1, spec 7.1).
  std::vector<std::string> own_bucket;
  // > 0: the parameters whose roles.reduce_group is expert_data (MoE experts) go to buckets of their
  // own (GradBucket::expert), reduced over the expert-data group of this size (padded for sharding
  // over it); 0: every parameter as a dense one.
  int expert_data_parallel_size = 0;
};

struct GradBucket {
  int64_t start = 0;              // element offset in the buffer
  int64_t numel = 0;              // padded size (a multiple of dp when sharded)
  std::vector<int> params;        // parameter indices (into the store), in layout order
  bool expert = false;            // expert parameters: reduced and sharded over the expert-data group
  int64_t shard_numel(int dp) const { return numel / dp; }
};

class GradBuffer {
 public:
  GradBuffer(const nn::ParameterStore& store, const GradBufferOptions& options);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t numel() const { return numel_; }              // padded total
  int64_t unpadded_numel() const { return unpadded_; }  // sum of the parameters' sizes
  int64_t param_start(int param) const { return param_start_.at(param); }  // element offset in the buffer
  int param_bucket(int param) const { return param_bucket_.at(param); }
  const GradBufferOptions& options() const { return options_; }

  Tensor all() const { return buffer_.as_tensor(DType::f32, {numel_}); }
  Tensor bucket_view(int bucket) const;                 // f32 [bucket numel]
  Tensor range(int64_t start, int64_t count) const;     // f32 [count] at element start
  Tensor param_grad(int param) const;                   // f32 view shaped like the parameter

  // Copies (converting to f32) the store's gradients of the bucket's parameters into the bucket
  // and zeroes its padding: the bucket is then ready to be reduced. One segmented_convert (one
  // CUDA launch) per bucket through the table built at construction for the store's grad layout.
  void load_bucket_from_store(int bucket, const nn::ParameterStore& store) const;

 private:
  GradBufferOptions options_;
  std::vector<GradBucket> buckets_;
  std::vector<int64_t> param_start_;
  std::vector<int> param_bucket_;
  std::vector<Shape> param_shape_;
  int64_t numel_ = 0, unpadded_ = 0;
  Buffer buffer_;
  // Per bucket: store grads (at their offsets in the store's grad buffer) -> bucket ranges, with
  // kSegmentZeroFill segments for the padding; valid for a store whose grads start at grad_base_.
  std::vector<ops::SegmentTable> load_tables_;
  const void* grad_base_ = nullptr;
  DType grad_dtype_ = DType::f32;
  ops::SegmentTable load_table(int bucket, const nn::ParameterStore& store) const;
};

// lcm(dp, 128): the bucket padding multiple of the distributed optimizer.
int64_t bucket_padding_multiple(int data_parallel_size);

}  // namespace tessera::parallel
