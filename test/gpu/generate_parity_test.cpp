// Generation's CUDA ops against their CPU references: attention over a KV cache (prefill, then one
// token at a time, left padding, grouped queries; f32 and bf16; the written caches too) and the
// greedy row reduction (argmax + log-softmax, padded vocabulary columns ignored). Prints one line per
// case; exits 1 on a failure, 77 without a visible GPU.
#include <cstdio>
#include <random>

#include "device_test_support.h"
#include "tessera/ops/argmax.h"
#include "tessera/ops/cached_attention.h"

using namespace tessera;
using namespace tessera::gpu_test;

namespace {
int failures = 0;

void cached_attention_case(const char* name, DType t, int64_t batch, int64_t na, int64_t ng, int64_t hn, int64_t prefill,
                           int64_t steps) {
  std::mt19937 rng(11);
  const int64_t seq = prefill + steps, capacity = seq + 3, width = (na + 2 * ng) * hn;
  const std::vector<float> qkv = random_normal(rng, seq * batch * width, 1.0f, t);
  std::vector<uint8_t> mask(static_cast<size_t>(batch * capacity), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = b % 4; s < seq; ++s) mask[b * capacity + s] = 1;  // row b: b % 4 padding tokens
  ops::AttentionParams p;
  p.num_heads = na;
  p.num_query_groups = ng;
  p.head_dim = hn;
  // CPU reference in f32.
  std::vector<float> kc(static_cast<size_t>(batch * capacity * ng * hn)), vc(kc.size()),
      out(static_cast<size_t>(seq * batch * na * hn));
  Tensor k_cpu(kc.data(), DType::f32, {batch, capacity, ng * hn}), v_cpu(vc.data(), DType::f32, {batch, capacity, ng * hn});
  Tensor mask_cpu(mask.data(), DType::u8, {batch, capacity});
  const int64_t row = batch * width, out_row = batch * na * hn;
  auto cpu_call = [&](int64_t s0, int64_t n) {
    ops::cached_attention_forward(Tensor(const_cast<float*>(qkv.data()) + s0 * row, DType::f32, {n, batch, width}),
                                  mask_cpu, p, k_cpu, v_cpu, s0,
                                  Tensor(out.data() + s0 * out_row, DType::f32, {n, batch, na * hn}));
  };
  cpu_call(0, prefill);
  for (int64_t s = prefill; s < seq; ++s) cpu_call(s, 1);
  // GPU.
  const auto qkv_bytes = to_bytes(qkv, t);
  DeviceTensor d_qkv(t, {seq, batch, width}, qkv_bytes.data()), d_mask(DType::u8, {batch, capacity}, mask.data());
  std::vector<unsigned char> zeros(kc.size() * dtype_size(t), 0);
  DeviceTensor d_k(t, {batch, capacity, ng * hn}, zeros.data()), d_v(t, {batch, capacity, ng * hn}, zeros.data());
  DeviceTensor d_out(t, {seq, batch, na * hn}, nullptr);
  const size_t esize = dtype_size(t);
  auto gpu_call = [&](int64_t s0, int64_t n) {
    Tensor q(static_cast<char*>(d_qkv.tensor.data()) + s0 * row * esize, t, {n, batch, width}, Device::cuda(0));
    Tensor o(static_cast<char*>(d_out.tensor.data()) + s0 * out_row * esize, t, {n, batch, na * hn}, Device::cuda(0));
    ops::cached_attention_forward(q, d_mask.tensor, p, d_k.tensor, d_v.tensor, s0, o);
  };
  gpu_call(0, prefill);
  for (int64_t s = prefill; s < seq; ++s) gpu_call(s, 1);
  const double tolerance = t == DType::f32 ? 1e-5 : 2e-2;
  const auto e_out = normalised_error(download_checked(d_out, std::string(name) + " out", failures), out, t);
  const auto e_k = normalised_error(download_checked(d_k, std::string(name) + " k_cache", failures), kc, t);
  const auto e_v = normalised_error(download_checked(d_v, std::string(name) + " v_cache", failures), vc, t);
  const bool ok = e_out.error <= tolerance && e_k.error <= tolerance && e_v.error <= tolerance &&
                  e_out.special_mismatches + e_k.special_mismatches + e_v.special_mismatches == 0;
  std::printf("%s cached_attention %s %s: out %.2e, caches %.2e %.2e (tolerance %.0e)\n", ok ? "PASS" : "FAIL", name,
              dtype_name(t), e_out.error, e_k.error, e_v.error, tolerance);
  if (!ok) ++failures;
}

void argmax_case(DType t) {
  std::mt19937 rng(5);
  const int64_t rows = 5, cols = 50304, valid = 50257;
  std::vector<float> logits = random_normal(rng, rows * cols, 3.0f, t);
  for (int64_t r = 0; r < rows; ++r) logits[r * cols + valid + 3] = 1000.0f;  // padding columns must be ignored
  logits[2 * cols + 17] = logits[2 * cols + 40000] = 50.0f;                   // a tie: the first wins
  std::vector<int32_t> index(rows);
  std::vector<float> logprob(rows);
  ops::argmax_log_softmax(Tensor(logits.data(), DType::f32, {rows, cols}), valid,
                          Tensor(index.data(), DType::i32, {rows}), Tensor(logprob.data(), DType::f32, {rows}));
  const auto bytes = to_bytes(logits, t);
  DeviceTensor d_logits(t, {rows, cols}, bytes.data()), d_index(DType::i32, {rows}, nullptr),
      d_logprob(DType::f32, {rows}, nullptr);
  ops::argmax_log_softmax(d_logits.tensor, valid, d_index.tensor, d_logprob.tensor);
  const auto g_logprob = download_checked(d_logprob, "argmax logprob", failures);
  std::vector<int32_t> g_index(rows);
  cuda_ok(cudaMemcpy(g_index.data(), d_index.tensor.data(), rows * 4, cudaMemcpyDeviceToHost), "index download");
  bool ok = index[2] == 17;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    ok = ok && g_index[r] == index[r];
    worst = std::max(worst, std::fabs(double(g_logprob[r]) - logprob[r]));
  }
  ok = ok && worst < 1e-3;
  std::printf("%s argmax_log_softmax %s: indices %s, max |logprob diff| %.2e\n", ok ? "PASS" : "FAIL", dtype_name(t),
              ok ? "equal" : "differ", worst);
  if (!ok) ++failures;
}
}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device visible\n");
    return 77;
  }
  for (DType t : {DType::f32, DType::bf16}) {
    cached_attention_case("small-gqa", t, 3, 4, 2, 64, 5, 4);
    cached_attention_case("hn8", t, 2, 4, 4, 8, 6, 3);
    cached_attention_case("gpt2-124m-b32", t, 32, 12, 12, 64, 128, 3);
    cached_attention_case("hn128", t, 2, 8, 8, 128, 40, 2);
    argmax_case(t);
  }
  std::printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
