// Deterministic mode (training.deterministic_mode, ops/deterministic_mode.h) on one GPU: every CUDA op
// that reduces with atomics in the default mode is run twice with the mode on and must give
// identical bytes both times, and must match its CPU reference (bitwise for the embedding gradient,
// whose deterministic order is the CPU's). The shapes are large enough that the default atomic
// paths do vary from run to run (reported, not required). Exits 77 (skipped) without a visible GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/cuda/tp_ops_cuda.h"
#include "tessera/ops/deterministic_mode.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/flash_attention.h"
#include "tessera/ops/layernorm.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/multi_tensor.h"
#include "tessera/ops/rmsnorm.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::upload;
using Bytes = std::vector<unsigned char>;
std::mt19937 rng(4321);
int failures = 0;

std::vector<float> randn(int64_t n, float stddev, DType t, float mean = 0.0f) {
  return gpu_test::random_normal(rng, n, stddev, t, mean);
}

Bytes raw(const DeviceTensor& d) {
  ops::cuda::synchronize();
  gpu_test::cuda_ok(cudaGetLastError(), "deterministic op");
  Bytes out(d.bytes);
  if (d.bytes) gpu_test::cuda_ok(cudaMemcpy(out.data(), d.tensor.data(), d.bytes, cudaMemcpyDeviceToHost), "download");
  return out;
}
std::vector<float> values(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}

void check(bool ok, const std::string& what, const std::string& detail) {
  std::printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.c_str());
  if (!ok) ++failures;
}

// Runs `run` (which returns the bytes of every output, from freshly uploaded accumulators) with the
// mode on twice (must agree) and, for the report, twice with it off.
Bytes twice(const std::string& what, const std::function<Bytes()>& run) {
  ops::set_deterministic_mode(false);
  const bool default_varies = run() != run();
  ops::set_deterministic_mode(true);
  const Bytes first = run(), second = run();
  check(first == second, what + " twice, deterministic mode",
        std::string(first == second ? "identical bytes" : "bytes differ") + " (" + std::to_string(first.size()) +
            " bytes; default mode " + (default_varies ? "varied" : "did not vary") + " over two runs)");
  return first;
}

void near(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref, DType out_t,
          double tolerance, double floor = 0.0) {
  const gpu_test::NormalisedError e = gpu_test::normalised_error(gpu, ref, out_t, floor);
  char detail[128];
  std::snprintf(detail, sizeof(detail), "normalised error %.3e (tolerance %.1e), %d NaN/Inf mismatches", e.error,
                tolerance, e.special_mismatches);
  check(e.error <= tolerance && e.special_mismatches == 0, what + " vs CPU", detail);
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

double tolerance(DType t) { return t == DType::f32 ? 2e-4 : 4e-2; }

void test_layernorm(DType t, int64_t rows, int64_t hidden) {
  const std::string name = "layernorm_backward " + std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                           std::to_string(hidden);
  auto x = randn(rows * hidden, 1.5f, t, 0.3f), w = randn(hidden, 0.5f, t, 1.0f), b = randn(hidden, 0.2f, t);
  auto dy = randn(rows * hidden, 1.0f, t), gw0 = randn(hidden, 0.1f, DType::f32), gb0 = randn(hidden, 0.1f, DType::f32);
  const Shape s{rows, hidden};
  std::vector<float> out(rows * hidden), mean(rows), rstd(rows);
  ops::layernorm_forward(cpu(x, s), cpu(w, {hidden}), cpu(b, {hidden}), 1e-5, cpu(out, s), cpu(mean, {rows}),
                         cpu(rstd, {rows}));
  auto dx = upload(x, t, s), dw = upload(w, t, {hidden}), ddy = upload(dy, t, s);
  auto dmean = upload(mean, DType::f32, {rows}), drstd = upload(rstd, DType::f32, {rows});
  std::unique_ptr<DeviceTensor> din, dgw, dgb;
  twice(name, [&] {
    din = upload(std::vector<float>(rows * hidden), t, s);
    dgw = upload(gw0, DType::f32, {hidden});
    dgb = upload(gb0, DType::f32, {hidden});
    ops::layernorm_backward(ddy->tensor, dx->tensor, dw->tensor, dmean->tensor, drstd->tensor, din->tensor, dgw->tensor,
                            dgb->tensor);
    return concat({raw(*din), raw(*dgw), raw(*dgb)});
  });
  std::vector<float> ref_din(rows * hidden), ref_gw(gw0), ref_gb(gb0);
  ops::layernorm_backward(cpu(dy, s), cpu(x, s), cpu(w, {hidden}), cpu(mean, {rows}), cpu(rstd, {rows}),
                          cpu(ref_din, s), cpu(ref_gw, {hidden}), cpu(ref_gb, {hidden}));
  near(name + " din", values(*din, name), ref_din, t, tolerance(t));
  near(name + " dweight", values(*dgw, name), ref_gw, DType::f32, tolerance(t));
  near(name + " dbias", values(*dgb, name), ref_gb, DType::f32, tolerance(t));
}

void test_rmsnorm(DType t, int64_t rows, int64_t hidden) {
  const std::string name = "rmsnorm_backward " + std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                           std::to_string(hidden);
  auto x = randn(rows * hidden, 1.5f, t, 0.3f), w = randn(hidden, 0.5f, t, 1.0f);
  auto dy = randn(rows * hidden, 1.0f, t), gw0 = randn(hidden, 0.1f, DType::f32);
  const Shape s{rows, hidden};
  std::vector<float> out(rows * hidden), rstd(rows);
  ops::rmsnorm_forward(cpu(x, s), cpu(w, {hidden}), 1e-5, cpu(out, s), cpu(rstd, {rows}));
  auto dx = upload(x, t, s), dw = upload(w, t, {hidden}), drstd = upload(rstd, DType::f32, {rows});
  std::unique_ptr<DeviceTensor> din, dgw;
  twice(name, [&] {
    din = upload(dy, t, s);  // din aliases dout, as the layers call it
    dgw = upload(gw0, DType::f32, {hidden});
    ops::rmsnorm_backward(din->tensor, dx->tensor, dw->tensor, drstd->tensor, din->tensor, dgw->tensor);
    return concat({raw(*din), raw(*dgw)});
  });
  std::vector<float> ref_din(rows * hidden), ref_gw(gw0);
  ops::rmsnorm_backward(cpu(dy, s), cpu(x, s), cpu(w, {hidden}), cpu(rstd, {rows}), cpu(ref_din, s),
                        cpu(ref_gw, {hidden}));
  near(name + " din (aliasing dout)", values(*din, name), ref_din, t, tolerance(t), 1.0);
  near(name + " dweight", values(*dgw, name), ref_gw, DType::f32, tolerance(t));
}

// Token ids with heavy repeats (a third of the tokens share one id), as real text has.
std::vector<int32_t> token_ids(int64_t n, int32_t low, int32_t high) {
  std::uniform_int_distribution<int32_t> id(low, high - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 3 == 0 ? low + (high - low) / 2 : id(rng);
  return ids;
}

void test_embedding(DType t, int64_t n, int64_t vocab, int64_t hidden) {
  const std::string name = "embedding_backward " + std::string(dtype_name(t)) + " n=" + std::to_string(n);
  std::vector<int32_t> ids = token_ids(n, 0, static_cast<int32_t>(vocab));
  auto dout = randn(n * hidden, 1.0f, t), g0 = randn(vocab * hidden, 0.1f, DType::f32);
  DeviceTensor dids(DType::i32, {n}, ids.data());
  auto ddout = upload(dout, t, {n, hidden});
  std::unique_ptr<DeviceTensor> dg;
  const Bytes gpu = twice(name, [&] {
    dg = upload(g0, DType::f32, {vocab, hidden});
    ops::embedding_backward(dids.tensor, ddout->tensor, dg->tensor);
    return raw(*dg);
  });
  std::vector<float> ref(g0);
  ops::embedding_backward(Tensor(ids.data(), DType::i32, {n}), cpu(dout, {n, hidden}), cpu(ref, {vocab, hidden}));
  check(gpu == gpu_test::to_bytes(ref, DType::f32), name + " vs CPU", "bitwise (tokens of a row in position order)");
}

void test_vocab_parallel_embedding(int64_t n, int64_t first_id, int64_t vocab, int64_t hidden) {
  const std::string name = "vocab_parallel_embedding_backward bf16 rows [" + std::to_string(first_id) + ", " +
                           std::to_string(first_id + vocab) + ")";
  std::vector<int32_t> ids = token_ids(n, 0, static_cast<int32_t>(3 * vocab));
  auto dout = randn(n * hidden, 1.0f, DType::bf16), g0 = randn(vocab * hidden, 0.1f, DType::f32);
  DeviceTensor dids(DType::i32, {n}, ids.data());
  auto ddout = upload(dout, DType::bf16, {n, hidden});
  std::unique_ptr<DeviceTensor> dg;
  const Bytes gpu = twice(name, [&] {
    dg = upload(g0, DType::f32, {vocab, hidden});
    ops::cuda::vocab_parallel_embedding_backward(dids.tensor, ddout->tensor, first_id, dg->tensor);
    return raw(*dg);
  });
  std::vector<float> ref(g0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i] - first_id;
    if (row < 0 || row >= vocab) continue;
    for (int64_t j = 0; j < hidden; ++j) ref[row * hidden + j] += dout[i * hidden + j];
  }
  check(gpu == gpu_test::to_bytes(ref, DType::f32), name + " vs CPU", "bitwise (tokens of a row in position order)");
}

Bytes double_bytes(double v) {
  Bytes b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

void test_scalar_sums(DType t, int64_t n) {
  const std::string dt(dtype_name(t));
  auto v = randn(n, 2.0f, t), m(v);
  for (int64_t i = 0; i < n; ++i) m[i] = i % 5 == 0 ? 0.0f : 1.0f;
  auto dv = upload(v, t, {n}), dm = upload(m, t, {n});
  double gpu_masked = 0.0, gpu_squares = 0.0;
  twice("masked_sum " + dt + " n=" + std::to_string(n), [&] {
    gpu_masked = ops::masked_sum(dv->tensor, dm->tensor);
    return double_bytes(gpu_masked);
  });
  twice("sum_of_squares " + dt + " n=" + std::to_string(n), [&] {
    gpu_squares = ops::sum_of_squares(dv->tensor);
    return double_bytes(gpu_squares);
  });
  double ref_masked = 0.0, ref_abs = 0.0, ref_squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (m[i] != 0.0f) ref_masked += double(m[i]) * v[i], ref_abs += std::fabs(double(m[i]) * v[i]);
    ref_squares += double(v[i]) * v[i];
  }
  check(std::fabs(gpu_masked - ref_masked) <= 1e-5 * ref_abs, "masked_sum " + dt + " vs CPU",
        std::to_string(gpu_masked) + " vs " + std::to_string(ref_masked));
  // Deferred reads: more queued at once than a chunk of host slots (64), read back in reverse;
  // each equals the eager sum of the same prefix (the device scalar is reused in stream order).
  ops::set_deterministic_mode(true);  // fixed-order sums (as twice() leaves it): bitwise comparable
  std::vector<ops::DeferredSum> deferred;
  std::vector<int64_t> lengths;
  for (int64_t k = 0; k < 80; ++k) {
    lengths.push_back(std::max<int64_t>(1, n - 7 * k));
    deferred.push_back(ops::masked_sum_deferred(dv->tensor.flat().rows(0, lengths.back()),
                                                dm->tensor.flat().rows(0, lengths.back())));
  }
  bool deferred_equal = true;
  for (size_t k = deferred.size(); k-- > 0;) {
    const double eager = ops::masked_sum(dv->tensor.flat().rows(0, lengths[k]), dm->tensor.flat().rows(0, lengths[k]));
    deferred_equal = deferred_equal && double_bytes(deferred[k].value()) == double_bytes(eager);
  }
  check(deferred_equal, "masked_sum_deferred " + dt + " x80 vs masked_sum", "bitwise, read in reverse order");
  check(std::fabs(gpu_squares - ref_squares) <= 1e-5 * ref_squares, "sum_of_squares " + dt + " vs CPU",
        std::to_string(gpu_squares) + " vs " + std::to_string(ref_squares));
}

void test_grad_stats() {
  std::vector<ops::TensorSegment> segments;
  int64_t offset = 0;
  for (int64_t numel : {int64_t(38597376), int64_t(768), int64_t(2359296), int64_t(3), int64_t(589824)}) {
    segments.push_back({offset, offset, offset, numel, segments.size() == 1 ? 0u : uint32_t(ops::kSegmentCountedInNorm)});
    offset += numel;
  }
  auto g = randn(offset, 0.01f, DType::f32);
  auto dg = upload(g, DType::f32, {offset});
  std::unique_ptr<DeviceTensor> dstats;
  ops::SegmentTable table(segments, Device::cuda(0));
  const Bytes gpu = twice("segmented_grad_stats (" + std::to_string(table.num_chunks()) + " chunks)", [&] {
    dstats = upload(std::vector<float>(4), DType::f32, {4});  // 2 doubles
    ops::segmented_grad_stats(dg->tensor, table, 1.0, Tensor(dstats->tensor.data(), DType::f64, {2}, Device::cuda(0)));
    return raw(*dstats);
  });
  double gpu_sum = 0.0, ref = 0.0;
  std::memcpy(&gpu_sum, gpu.data(), sizeof gpu_sum);
  for (const auto& seg : segments)
    if (seg.flags & ops::kSegmentCountedInNorm)
      for (int64_t i = 0; i < seg.numel; ++i) ref += double(g[seg.src_offset + i]) * g[seg.src_offset + i];
  check(std::fabs(gpu_sum - ref) <= 1e-9 * ref, "segmented_grad_stats vs CPU",
        std::to_string(gpu_sum) + " vs " + std::to_string(ref));
}

// The weight gradient GEMM of a linear layer: k = tokens, the shape where cuBLASLt picks split-K.
void test_linear_backward(DType t, int64_t rows, int64_t in_f, int64_t out_f) {
  const std::string name = "linear_backward " + std::string(dtype_name(t)) + " tokens=" + std::to_string(rows) + " " +
                           std::to_string(in_f) + "->" + std::to_string(out_f);
  auto x = randn(rows * in_f, 1.0f, t), w = randn(out_f * in_f, 0.05f, t), dy = randn(rows * out_f, 1.0f, t);
  auto gw0 = randn(out_f * in_f, 0.1f, DType::f32), gb0 = randn(out_f, 0.1f, DType::f32);
  auto dx = upload(x, t, {rows, in_f}), dw = upload(w, t, {out_f, in_f}), ddy = upload(dy, t, {rows, out_f});
  std::unique_ptr<DeviceTensor> din, dgw, dgb;
  twice(name, [&] {
    din = upload(std::vector<float>(rows * in_f), t, {rows, in_f});
    dgw = upload(gw0, DType::f32, {out_f, in_f});
    dgb = upload(gb0, DType::f32, {out_f});
    ops::linear_backward(ddy->tensor, dx->tensor, dw->tensor, din->tensor, dgw->tensor, dgb->tensor);
    return concat({raw(*din), raw(*dgw), raw(*dgb)});
  });
  std::vector<float> ref_din(rows * in_f), ref_gw(gw0), ref_gb(gb0);
  ops::linear_backward(cpu(dy, {rows, out_f}), cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), cpu(ref_din, {rows, in_f}),
                       cpu(ref_gw, {out_f, in_f}), cpu(ref_gb, {out_f}));
  near(name + " din", values(*din, name), ref_din, t, tolerance(t));
  near(name + " dweight", values(*dgw, name), ref_gw, DType::f32, tolerance(t));
  near(name + " dbias", values(*dgb, name), ref_gb, DType::f32, tolerance(t));
}

void test_flash_attention(int64_t s, int64_t b, int64_t na, int64_t ng, int64_t hn, bool causal) {
  const DType t = DType::bf16;
  const std::string name = "flash_attention_backward bf16 s=" + std::to_string(s) + " b=" + std::to_string(b) +
                           " na=" + std::to_string(na) + " ng=" + std::to_string(ng) + " hn=" + std::to_string(hn) +
                           (causal ? " causal" : " full");
  const int64_t width = (na + 2 * ng) * hn, out_cols = na * hn;
  auto qkv = randn(s * b * width, 1.0f, t), dout = randn(s * b * out_cols, 1.0f, t);
  ops::AttentionParams p;
  p.num_heads = na, p.num_query_groups = ng, p.head_dim = hn, p.causal = causal;
  auto dqkv_in = upload(qkv, t, {s, b, width}), ddout = upload(dout, t, {s, b, out_cols});
  auto dout_fwd = upload(std::vector<float>(s * b * out_cols), t, {s, b, out_cols});
  auto dlse = upload(std::vector<float>(b * na * s), DType::f32, {b, na, s});
  ops::flash_attention_forward(dqkv_in->tensor, Tensor(), p, dout_fwd->tensor, dlse->tensor);
  std::unique_ptr<DeviceTensor> ddqkv;
  twice(name, [&] {
    ddqkv = upload(std::vector<float>(s * b * width), t, {s, b, width});
    ops::flash_attention_backward(ddout->tensor, dqkv_in->tensor, dout_fwd->tensor, dlse->tensor, Tensor(), p,
                                  ddqkv->tensor);
    return raw(*ddqkv);
  });
  std::vector<float> r_out(s * b * out_cols), r_lse(b * na * s), r_dqkv(s * b * width);
  ops::flash_attention_forward(cpu(qkv, {s, b, width}), Tensor(), p, cpu(r_out, {s, b, out_cols}), cpu(r_lse, {b, na, s}));
  ops::flash_attention_backward(cpu(dout, {s, b, out_cols}), cpu(qkv, {s, b, width}), cpu(r_out, {s, b, out_cols}),
                                cpu(r_lse, {b, na, s}), Tensor(), p, cpu(r_dqkv, {s, b, width}));
  double max_ref = 0.0;
  for (float x : r_dqkv) max_ref = std::max(max_ref, std::fabs(double(x)));
  near(name + " dqkv", values(*ddqkv, name), r_dqkv, t, 4e-2, 0.05 * max_ref);
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  const bool ran = gpu_test::ran_without_exception([] {
    for (DType t : {DType::f32, DType::bf16}) {
      test_layernorm(t, 37, 96);
      test_layernorm(t, 8192, 768);
      test_layernorm(t, 3, 12289);
      test_rmsnorm(t, 8192, 768);
      test_rmsnorm(t, 9, 4099);
      test_embedding(t, 8192, 50304, 768);
      test_scalar_sums(t, 300000);
    }
    test_embedding(DType::bf16, 1, 10, 5);
    test_vocab_parallel_embedding(8192, 25152, 25152, 768);
    test_grad_stats();
    test_linear_backward(DType::bf16, 8192, 768, 768);
    test_linear_backward(DType::bf16, 8192, 3072, 768);
    test_linear_backward(DType::f32, 4096, 768, 2304);
    test_flash_attention(1024, 2, 4, 4, 64, true);
    test_flash_attention(257, 3, 8, 2, 128, false);
  });
  if (!ran) return 1;
  std::printf("\ndeterministic mode parity: %s (%d failures)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
