#include "tessera/ops/relative_position_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/t5_ops_cuda.h"
#endif

namespace tessera::ops {

int32_t relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance) {
  TESSERA_CHECK(num_buckets >= 2 && max_distance >= 1, "relative position buckets need num_buckets >= 2 and ",
                "max_distance >= 1, got ", num_buckets, " and ", max_distance);
  int64_t bucket = 0, n = num_buckets, distance;
  if (bidirectional) {
    n /= 2;
    if (relative_position > 0) bucket += n;
    distance = std::llabs(relative_position);
  } else {
    distance = -std::min<int64_t>(relative_position, 0);
  }
  const int64_t max_exact = n / 2;
  if (distance < max_exact) return static_cast<int32_t>(bucket + distance);
  // HF: max_exact + (log(d / max_exact) / log(max_distance / max_exact) * (n - max_exact)).long(), in f32
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float scale = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / scale * static_cast<float>(n - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), n - 1);
  return static_cast<int32_t>(bucket + large);
}

std::vector<int32_t> relative_position_buckets(int64_t sq, int64_t sk, int64_t query_offset, bool bidirectional,
                                               int64_t num_buckets, int64_t max_distance) {
  std::vector<int32_t> out(static_cast<size_t>(sq * sk));
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j)
      out[static_cast<size_t>(i * sk + j)] =
          relative_position_bucket(j - (i + query_offset), bidirectional, num_buckets, max_distance);
  return out;
}

namespace {
void check(const char* op, const Tensor& weight, const Tensor& buckets, const Tensor& bias) {
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [num_buckets, heads], got ", weight.describe());
  TESSERA_CHECK(buckets.ndim() == 2 && buckets.dtype() == DType::i32, op, ": buckets must be i32 [sq, sk], got ",
                buckets.describe());
  expect_tensor(bias, bias.dtype(), {weight.dim(1), buckets.dim(0), buckets.dim(1)}, "bias");
}
}  // namespace

void relative_position_bias_forward(const Tensor& weight, const Tensor& buckets, const Tensor& out) {
  const char* op = "relative_position_bias_forward";
  check(op, weight, buckets, out);
  if (detail::runs_on_cuda(op, {&weight, &buckets, &out}))
    return TESSERA_CUDA_OP(relative_position_bias_forward(weight, buckets, out));
  detail::require_same_dtype(op, weight, "weight", out, "out");
  const int64_t nb = weight.dim(0), nh = weight.dim(1), n = buckets.numel();
  const int32_t* bk = buckets.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK(bk[i] >= 0 && bk[i] < nb, op, ": bucket ", bk[i], " outside [0, ", nb, ")");
  detail::visit_f32_or_f64(op, weight, "weight", [&](auto tag) {
    using T = decltype(tag);
    const T* w = weight.data_as<T>();
    T* o = out.data_as<T>();
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < n; ++i) o[h * n + i] = w[bk[i] * nh + h];
  });
}

void relative_position_bias_backward(const Tensor& dbias, const Tensor& buckets, const Tensor& dweight) {
  const char* op = "relative_position_bias_backward";
  check(op, dweight, buckets, dbias);
  if (detail::runs_on_cuda(op, {&dbias, &buckets, &dweight}))
    return TESSERA_CUDA_OP(relative_position_bias_backward(dbias, buckets, dweight));
  detail::require_same_dtype(op, dweight, "dweight", dbias, "dbias");
  const int64_t nh = dweight.dim(1), n = buckets.numel();
  const int32_t* bk = buckets.data_as<int32_t>();
  detail::visit_f32_or_f64(op, dweight, "dweight", [&](auto tag) {
    using T = decltype(tag);
    const T* d = dbias.data_as<T>();
    T* w = dweight.data_as<T>();
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < n; ++i) w[bk[i] * nh + h] += d[h * n + i];
  });
}

}  // namespace tessera::ops
