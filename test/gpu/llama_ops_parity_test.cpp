// Llama-style op parity (label gpu): the CUDA SwiGLU forward / backward and RoPE on fused QKV rows
// with partial rotary dims, interleaved pairs and per-row position ids against the CPU reference on
// the same rounded inputs (f32, bf16, f16); the unfused CUDA attention (scores GEMM + softmax kernel)
// with ALiBi, forward and backward. Exits 77 (skipped) without a visible GPU. (ALiBi and
// RoPE'd inputs inside the flash kernel: flash_attention_parity_test.)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/rope.h"
#include "tessera/ops/swiglu.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::upload;
std::mt19937 rng(2468);
int failures = 0;

gpu_test::ParityTable results;

std::vector<float> download(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}

// As ops_parity_test: fp32 math on both sides, the storage rounding of inputs and outputs.
double base_tolerance(DType t) { return t == DType::f32 ? 1e-4 : t == DType::bf16 ? 2e-2 : 4e-3; }

void compare(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref,
             double factor, double extra = 0.0) {
  const double tol = base_tolerance(t) * factor + extra;
  const gpu_test::NormalisedError m = gpu_test::normalised_error(gpu, ref, t, 0.0);
  const std::string key = op + " " + std::string(dtype_name(t));
  if (!results.record(key, m.error, tol, m.error <= tol && !m.special_mismatches && std::isfinite(m.error))) {
    ++failures;
    std::printf("FAIL %s: normalised error %.3g (tolerance %.3g), %d NaN/Inf mismatches\n", key.c_str(), m.error, tol,
                m.special_mismatches);
  }
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

void test_swiglu() {
  for (DType t : kDtypes)
    for (const auto& [n, f] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {4096, 688}, {3, 8192}}) {
      auto in = gpu_test::random_normal(rng, n * 2 * f, 2.0f, t);
      auto dy = gpu_test::random_normal(rng, n * f, 1.0f, t);
      auto d_in = upload(in, t, {n, 2 * f});
      auto d_dy = upload(dy, t, {n, f});
      DeviceTensor d_out(t, {n, f}, nullptr), d_din(t, {n, 2 * f}, nullptr);
      ops::swiglu_forward(d_in->tensor, d_out.tensor);
      ops::swiglu_backward(d_dy->tensor, d_in->tensor, d_din.tensor);
      std::vector<float> out(static_cast<size_t>(n * f)), din(static_cast<size_t>(n * 2 * f));
      ops::swiglu_forward(cpu(in, {n, 2 * f}), cpu(out, {n, f}));
      ops::swiglu_backward(cpu(dy, {n, f}), cpu(in, {n, 2 * f}), cpu(din, {n, 2 * f}));
      compare("swiglu_forward", t, download(d_out, "swiglu_forward"), out, 1);
      compare("swiglu_backward", t, download(d_din, "swiglu_backward"), din, 2);
    }
}

// RoPE's angle error in fp32 grows with the position (as fused_ops_parity_test's rope check).
double rope_extra_tolerance(int64_t max_position) { return 8.0 * double(max_position) * std::ldexp(1.0, -23); }

void test_rope_variants() {
  struct Case { int64_t s, b, na, ng, hn, rotary_dim; bool interleaved, per_row; };
  const std::vector<Case> cases = {{5, 2, 4, 2, 16, 8, false, true},    {64, 2, 32, 8, 64, 64, false, true},
                                   {33, 3, 12, 12, 64, 32, true, false}, {17, 1, 8, 1, 128, 128, true, true},
                                   {16, 4, 4, 4, 64, 16, false, false}};
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      const int64_t hpg = c.na / c.ng, width = (c.na + 2 * c.ng) * c.hn, stride = (hpg + 2) * c.hn;
      const Shape shape{c.s, c.b, width};
      auto qkv = gpu_test::random_normal(rng, shape_numel(shape), 1.0f, t);
      std::vector<int32_t> pos(static_cast<size_t>(c.b * c.s));
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>((i * 37) % 2048);
      const Shape pos_shape = c.per_row ? Shape{c.s * c.b} : Shape{c.b, c.s};
      DeviceTensor dpos(DType::i32, pos_shape, pos.data());
      Tensor cpu_pos(pos.data(), DType::i32, pos_shape);
      ops::RopeHeads q{0, hpg, c.hn, c.ng, stride}, k{hpg * c.hn, 1, c.hn, c.ng, stride};
      q.rotary_dim = k.rotary_dim = c.rotary_dim;
      q.interleaved = k.interleaved = c.interleaved;
      auto d = upload(qkv, t, shape);
      std::vector<float> ref(qkv);
      for (const auto& heads : {q, k}) {
        ops::rope_forward_rows(d->tensor, heads, dpos.tensor, 500000.0);
        ops::rope_forward_rows(cpu(ref, shape), heads, cpu_pos, 500000.0);
      }
      compare("rope_rows_forward_partial_interleaved_per_row", t, download(*d, "rope forward"), ref, 1,
              rope_extra_tolerance(2047));
      for (const auto& heads : {q, k}) {
        ops::rope_backward_rows(d->tensor, heads, dpos.tensor, 500000.0);
        ops::rope_backward_rows(cpu(ref, shape), heads, cpu_pos, 500000.0);
      }
      compare("rope_rows_backward_partial_interleaved_per_row", t, download(*d, "rope backward"), ref, 2,
              2 * rope_extra_tolerance(2047));
    }
}

// The unfused attention path (attention dropout > 0 or f32 on a GPU) with ALiBi: slopes of heads
// [na, 2 na) of 2 na (a tensor-parallel rank's), causal and bidirectional, with GQA.
void test_unfused_alibi_attention() {
  struct Case { int64_t s, b, na, ng, hn; bool causal; };
  for (DType t : kDtypes)
    for (const Case& c : std::vector<Case>{{17, 2, 4, 2, 32, true}, {64, 3, 6, 3, 64, false}, {128, 1, 8, 8, 64, true}}) {
      const int64_t width = (c.na + 2 * c.ng) * c.hn, cols = c.na * c.hn;
      auto qkv = gpu_test::random_normal(rng, c.s * c.b * width, 1.0f, t);
      auto dout = gpu_test::random_normal(rng, c.s * c.b * cols, 1.0f, t);
      ops::AttentionParams p;
      p.num_heads = c.na, p.num_query_groups = c.ng, p.head_dim = c.hn, p.causal = c.causal;
      p.alibi = true, p.alibi_heads = 2 * c.na, p.alibi_first_head = c.na;
      auto d_qkv = upload(qkv, t, {c.s, c.b, width});
      auto d_dout = upload(dout, t, {c.s, c.b, cols});
      DeviceTensor d_out(t, {c.s, c.b, cols}, nullptr), d_probs(t, {c.b, c.na, c.s, c.s}, nullptr);
      DeviceTensor d_dqkv(t, {c.s, c.b, width}, nullptr);
      ops::attention_forward(d_qkv->tensor, Tensor(), p, RandomStream(0, 0), d_out.tensor, d_probs.tensor);
      ops::attention_backward(d_dout->tensor, d_qkv->tensor, d_probs.tensor, p, RandomStream(0, 0), d_dqkv.tensor);
      std::vector<float> out(static_cast<size_t>(c.s * c.b * cols)), probs(static_cast<size_t>(c.b * c.na * c.s * c.s));
      std::vector<float> dqkv(qkv.size());
      ops::attention_forward(cpu(qkv, {c.s, c.b, width}), Tensor(), p, RandomStream(0, 0), cpu(out, {c.s, c.b, cols}),
                             cpu(probs, {c.b, c.na, c.s, c.s}));
      ops::attention_backward(cpu(dout, {c.s, c.b, cols}), cpu(qkv, {c.s, c.b, width}), cpu(probs, {c.b, c.na, c.s, c.s}),
                              p, RandomStream(0, 0), cpu(dqkv, {c.s, c.b, width}));
      compare("attention_unfused_alibi_out", t, download(d_out, "attention out"), out, 1);
      compare("attention_unfused_alibi_probs", t, download(d_probs, "attention probs"), probs, 1);
      compare("attention_unfused_alibi_dqkv", t, download(d_dqkv, "attention dqkv"), dqkv, 3);
    }
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  const bool ran = gpu_test::ran_without_exception([] {
    test_swiglu();
    test_rope_variants();
    test_unfused_alibi_attention();
  });
  return ran ? results.summarise("llama ops parity", failures) : 1;
}
