// Gradient reduction over the data-parallel group, bucket by bucket (Megatron DDP, spec 7.2): each
// bucket is filled from the model's gradients and averaged over DP (MPI: pre-scaled by 1/dp, then
// summed; NCCL: ncclAvg), by all-reduce (plain DDP) or reduce-scatter (distributed optimizer: rank
// d keeps the reduced shard d of every bucket). On the CPU all buckets are reduced after backward;
// on a GPU the trainer calls reduce_bucket as each bucket's last gradient is written (overlapping
// the backward) and finish() waits for all of them.
#pragma once
#include "tessera/distributed/grad_buffer.h"
#include "tessera/runtime/communicator.h"

namespace tessera::parallel {

enum class GradReduction { all_reduce, reduce_scatter };

class DataParallelGradReducer {
 public:
  // data_group: the DP communicator (its size must match the buffer's data_parallel_size).
  // expert_data_group: the expert-data group, for the buffer's expert buckets (MoE): those are scaled
  // by 1 / dp too (each expert's gradient already sums the tokens of its expert-model group) and
  // summed over it.
  DataParallelGradReducer(GradBuffer& buffer, Communicator& data_group, GradReduction reduction,
                          Communicator* expert_data_group = nullptr);

  // Fills bucket b from the store's gradients, scales it by 1/dp and reduces it over DP. On a GPU the
  // reduction runs beside later compute (it overlaps the rest of the backward); finish() waits for it.
  void reduce_bucket(int bucket, const nn::ParameterStore& store);
  bool reduced(int bucket) const { return reduced_.at(bucket); }
  // Reduces every bucket not reduced yet this step, then waits for all of them.
  void finish(const nn::ParameterStore& store);
  // Every bucket of the step, in layout order (the CPU path: after backward).
  void reduce_all(const nn::ParameterStore& store);

  // The element range of bucket b that holds this rank's reduced result (the whole bucket for
  // all-reduce, shard dp_rank for reduce-scatter).
  int64_t owned_start(int bucket) const;
  int64_t owned_numel(int bucket) const;
  GradReduction reduction() const { return reduction_; }
  Communicator& data_group() const { return data_group_; }
  Communicator& group_of(int bucket) const;  // the data group, or the expert-data group for an expert bucket

 private:
  GradBuffer& buffer_;
  Communicator& data_group_;
  Communicator* expert_data_group_;
  GradReduction reduction_;
  std::vector<bool> reduced_;
};

}  // namespace tessera::parallel

namespace tessera::parallel {
// The sum over the DP group of a per-rank value (loss sums, token counts). The communicator carries
// f32, so the value travels as a high and a low f32 part (only the f32 sums round).
double sum_over_data_parallel(Communicator& data_group, double value);
}  // namespace tessera::parallel
