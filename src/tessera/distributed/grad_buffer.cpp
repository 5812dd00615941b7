#include "tessera/distributed/grad_buffer.h"

#include <algorithm>
#include <numeric>

#include "tessera/ops/elementwise.h"

namespace tessera::parallel {

namespace {
int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }
constexpr int64_t kParamAlignment = 64;  // elements, Megatron's param start alignment
}  // namespace

int64_t bucket_padding_multiple(int data_parallel_size) {
  return std::lcm(static_cast<int64_t>(data_parallel_size), int64_t{128});
}

GradBuffer::GradBuffer(const nn::ParameterStore& store, const GradBufferOptions& options) : options_(options) {
  TESSERA_CHECK(options_.data_parallel_size >= 1, "GradBuffer: data-parallel size ", options_.data_parallel_size,
                " must be >= 1");
  TESSERA_CHECK(options_.bucket_size >= 0, "GradBuffer: bucket size ", options_.bucket_size, " must be >= 0");
  const auto& params = store.parameters();
  const int n = static_cast<int>(params.size());
  param_start_.assign(n, 0);
  param_bucket_.assign(n, -1);
  for (const auto& p : params) param_shape_.push_back(p.shape);
  for (const auto& name : options_.own_bucket)
    TESSERA_CHECK(store.index_of(name) >= 0, "GradBuffer: own-bucket parameter '", name, "' is not in the store");

  const int dp = options_.data_parallel_size;
  TESSERA_CHECK(options_.expert_data_parallel_size >= 0, "GradBuffer: expert-data-parallel size ",
                options_.expert_data_parallel_size, " must be >= 0");
  int64_t pad_multiple = options_.pad_for_sharding ? bucket_padding_multiple(dp) : 1;
  const bool separate_experts = options_.expert_data_parallel_size > 0;
  auto is_expert = [&](int i) { return separate_experts && params[i].roles.reduce_group == nn::ReduceGroup::expert_data; };
  int64_t offset = 0;
  GradBucket current;
  current.start = 0;
  auto close_bucket = [&]() {
    if (current.params.empty()) return;
    int64_t end = round_up(offset, pad_multiple);
    current.numel = end - current.start;
    buckets_.push_back(current);
    offset = end;
    current = GradBucket{};
    current.start = offset;
  };
  auto is_own_bucket = [&](const std::string& name) {
    return std::find(options_.own_bucket.begin(), options_.own_bucket.end(), name) != options_.own_bucket.end();
  };
  // Dense parameters first (reverse registration order), then the expert ones in buckets of their own.
  for (const bool experts : {false, true}) {
    if (experts) {
      close_bucket();
      if (options_.pad_for_sharding) pad_multiple = bucket_padding_multiple(options_.expert_data_parallel_size);
      current.expert = true;
    }
    for (int i = n - 1; i >= 0; --i) {  // reverse registration order
      if (is_expert(i) != experts) continue;
      const auto& p = params[i];
      const bool alone = is_own_bucket(p.name);
      if (alone) close_bucket();
      current.expert = experts;
      if (options_.pad_for_sharding) offset = round_up(offset, kParamAlignment);
      param_start_[i] = offset;
      param_bucket_[i] = static_cast<int>(buckets_.size());
      current.params.push_back(i);
      offset += p.value.numel();
      unpadded_ += p.value.numel();
      if (alone || (options_.bucket_size > 0 && offset - current.start >= options_.bucket_size)) close_bucket();
    }
  }
  close_bucket();
  numel_ = offset;
  buffer_ = Buffer(static_cast<size_t>(numel_) * sizeof(float), store.device());
  grad_base_ = store.all_grads().data();
  grad_dtype_ = store.grad_dtype();
  for (size_t b = 0; b < buckets_.size(); ++b) load_tables_.push_back(load_table(static_cast<int>(b), store));
}

ops::SegmentTable GradBuffer::load_table(int bucket, const nn::ParameterStore& store) const {
  const GradBucket& b = buckets_.at(bucket);
  const auto* base = static_cast<const char*>(store.all_grads().data());
  const size_t element = dtype_size(store.grad_dtype());  // f32 main grads for half stores on CUDA
  std::vector<int> params = b.params;
  std::sort(params.begin(), params.end(), [&](int x, int y) { return param_start_[x] < param_start_[y]; });
  std::vector<ops::TensorSegment> segments;
  int64_t cursor = b.start;  // first element not covered yet
  auto zero_until = [&](int64_t end) {
    if (end > cursor) segments.push_back({0, cursor, 0, end - cursor, ops::kSegmentZeroFill});
  };
  for (int i : params) {
    const Tensor& grad = store.grad(i);
    const auto byte_offset = static_cast<const char*>(grad.data()) - base;
    TESSERA_CHECK(byte_offset >= 0 && static_cast<size_t>(byte_offset) % element == 0, "GradBuffer: the gradient of '",
                  store.parameters()[i].name, "' is not inside the store's gradient buffer");
    zero_until(param_start_[i]);
    segments.push_back({static_cast<int64_t>(static_cast<size_t>(byte_offset) / element), param_start_[i], 0,
                        grad.numel(), 0});
    cursor = param_start_[i] + grad.numel();
  }
  zero_until(b.start + b.numel);
  return ops::SegmentTable(std::move(segments), store.device());
}

Tensor GradBuffer::bucket_view(int bucket) const {
  const GradBucket& b = buckets_.at(bucket);
  return range(b.start, b.numel);
}

Tensor GradBuffer::range(int64_t start, int64_t count) const {
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= numel_, "GradBuffer: range [", start, ", ",
                start + count, ") outside the buffer of ", numel_, " elements");
  return buffer_.as_tensor(DType::f32, {count}, static_cast<size_t>(start) * sizeof(float));
}

Tensor GradBuffer::param_grad(int param) const {
  return range(param_start_.at(param), shape_numel(param_shape_.at(param))).view(param_shape_.at(param));
}

void GradBuffer::load_bucket_from_store(int bucket, const nn::ParameterStore& store) const {
  TESSERA_CHECK(bucket >= 0 && bucket < static_cast<int>(buckets_.size()), "GradBuffer: bucket ", bucket,
                " outside [0, ", buckets_.size(), ")");
  const Tensor grads = store.all_grads();
  // The store's gradients are this buffer (ParameterStore::use_external_grads): nothing to copy, and the
  // padding is zero since zero_grads() cleared the whole buffer and no gradient view covers it.
  if (grads.data() == buffer_.data()) return;
  if (grads.data() == grad_base_ && store.grad_dtype() == grad_dtype_) {
    ops::segmented_convert(grads, all(), load_tables_[static_cast<size_t>(bucket)]);
  } else {  // another store than the one laid out for (same parameters): a one-off table
    ops::segmented_convert(grads, all(), load_table(bucket, store));
  }
}

}  // namespace tessera::parallel
