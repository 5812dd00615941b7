#include "tessera/parallel/grad_buffer.h"

#include <algorithm>
#include <cstring>
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
  const int64_t pad_multiple = options_.pad_for_sharding ? bucket_padding_multiple(dp) : 1;
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
  for (int i = n - 1; i >= 0; --i) {  // reverse registration order
    const auto& p = params[i];
    const bool alone = is_own_bucket(p.name);
    if (alone) close_bucket();
    if (options_.pad_for_sharding) offset = round_up(offset, kParamAlignment);
    param_start_[i] = offset;
    param_bucket_[i] = static_cast<int>(buckets_.size());
    current.params.push_back(i);
    offset += p.value.numel();
    unpadded_ += p.value.numel();
    if (alone || (options_.bucket_size > 0 && offset - current.start >= options_.bucket_size)) close_bucket();
  }
  close_bucket();
  numel_ = offset;
  buffer_ = Buffer(static_cast<size_t>(numel_) * sizeof(float), store.device());
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
  const GradBucket& b = buckets_.at(bucket);
  std::memset(static_cast<float*>(buffer_.data()) + b.start, 0, static_cast<size_t>(b.numel) * sizeof(float));
  for (int i : b.params) ops::copy(store.grad(i), param_grad(i));
}

}  // namespace tessera::parallel
