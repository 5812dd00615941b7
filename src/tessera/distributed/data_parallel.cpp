#include "tessera/distributed/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "tessera/ops/elementwise.h"

namespace tessera::parallel {

DataParallelGradReducer::DataParallelGradReducer(GradBuffer& buffer, Communicator& data_group,
                                                 GradReduction reduction, Communicator* expert_data_group)
    : buffer_(buffer),
      data_group_(data_group),
      expert_data_group_(expert_data_group),
      reduction_(reduction),
      reduced_(buffer.buckets().size(), false) {
  TESSERA_CHECK(data_group_.size() == buffer_.options().data_parallel_size, "DataParallelGradReducer: the ",
                data_group_.name(), " group has ", data_group_.size(), " ranks but the gradient buffer was laid out for ",
                buffer_.options().data_parallel_size);
  for (const auto& b : buffer_.buckets())
    if (b.expert)
      TESSERA_CHECK(expert_data_group_ && expert_data_group_->size() == buffer_.options().expert_data_parallel_size,
                    "DataParallelGradReducer: the buffer has expert buckets laid out for ",
                    buffer_.options().expert_data_parallel_size, " expert-data ranks but the expert-data group has ",
                    expert_data_group_ ? expert_data_group_->size() : 0);
  if (reduction_ == GradReduction::reduce_scatter)
    for (size_t i = 0; i < buffer_.buckets().size(); ++i) {
      const auto& b = buffer_.buckets()[i];
      const int parts = group_of(static_cast<int>(i)).size();
      TESSERA_CHECK(b.numel % parts == 0, "DataParallelGradReducer: bucket of ", b.numel,
                    " elements does not split into ", parts,
                    " shards (reduce-scatter needs the padded distributed-optimizer layout)");
    }
}

Communicator& DataParallelGradReducer::group_of(int bucket) const {
  return buffer_.buckets().at(bucket).expert ? *expert_data_group_ : data_group_;
}

void DataParallelGradReducer::reduce_bucket(int bucket, const nn::ParameterStore& store) {
  TESSERA_CHECK(!reduced_.at(bucket), "gradient bucket ", bucket, " reduced twice in one step");
  buffer_.load_bucket_from_store(bucket, store);
  const int dp = data_group_.size();
  Communicator& group = group_of(bucket);
  const bool expert = buffer_.buckets().at(bucket).expert;
  if (dp > 1) {
    Tensor full = buffer_.bucket_view(bucket);
    // Average over DP: NCCL divides inside the reduction; on MPI, Megatron's pre-scaling by 1/dp.
    // Expert buckets: scaled by 1/dp (not 1/edp), then summed over the expert-data group.
    ReduceOp op = ReduceOp::avg;
    if (group.backend() != CommBackend::nccl || expert) {
      ops::scale_inplace(full, 1.0 / static_cast<double>(dp));
      op = ReduceOp::sum;
    }
    if (group.size() > 1) {
      group.set_compute_waits(false);  // nothing reads the bucket before finish()
      if (reduction_ == GradReduction::all_reduce) {
        group.all_reduce(full, op);
      } else {
        Tensor shard = buffer_.range(owned_start(bucket), owned_numel(bucket));
        group.reduce_scatter(full, shard, op);
      }
      group.set_compute_waits(true);
    }
  }
  reduced_[bucket] = true;
}

void DataParallelGradReducer::finish(const nn::ParameterStore& store) {
  for (size_t b = 0; b < reduced_.size(); ++b)
    if (!reduced_[b]) reduce_bucket(static_cast<int>(b), store);
  data_group_.synchronize();
  if (expert_data_group_) expert_data_group_->synchronize();
  std::fill(reduced_.begin(), reduced_.end(), false);
}

void DataParallelGradReducer::reduce_all(const nn::ParameterStore& store) { finish(store); }

int64_t DataParallelGradReducer::owned_start(int bucket) const {
  const GradBucket& b = buffer_.buckets().at(bucket);
  if (reduction_ == GradReduction::all_reduce) return b.start;
  const Communicator& group = group_of(bucket);
  return b.start + group.rank() * (b.numel / group.size());
}

int64_t DataParallelGradReducer::owned_numel(int bucket) const {
  const GradBucket& b = buffer_.buckets().at(bucket);
  return reduction_ == GradReduction::all_reduce ? b.numel : b.numel / group_of(bucket).size();
}

}  // namespace tessera::parallel

namespace tessera::parallel {
double sum_over_data_parallel(Communicator& data_group, double value) {
  if (data_group.size() == 1) return value;
  Buffer buffer(2 * sizeof(float), Device::cpu());
  Tensor parts = buffer.as_tensor(DType::f32, {2});
  float* v = parts.data_as<float>();
  v[0] = static_cast<float>(value);
  v[1] = std::isfinite(value) ? static_cast<float>(value - static_cast<double>(v[0])) : 0.0f;
  data_group.all_reduce(parts, ReduceOp::sum);
  return static_cast<double>(v[0]) + static_cast<double>(v[1]);
}
}  // namespace tessera::parallel
