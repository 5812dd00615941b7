// Fused attention parity and speed (label gpu): CUDA bf16/f16 flash forward (out, lse) and backward
// (dq, dk, dv) against the CPU f32 reference on the same rounded inputs over a grid of head dims,
// lengths, batches, GQA shapes, causal/bidirectional and key padding (with rows that see no key),
// with guard bytes around every device output, each case four ways: plain, with ALiBi (the slopes of
// heads [na, 2 na) of 2 na, as a tensor-parallel rank holds them), on RoPE'd inputs (q and k
// rotated by the CPU RoPE with per-row positions, then rounded) and with document ids (Megatron's
// reset_attention_mask: short and long documents, so whole tiles are skipped); the unfused CUDA
// attention (f32 and bf16, forward and backward, dropout 0 and 0.1 with the CPU's masks) with document
// ids against the CPU; the fused kernels with attention dropout 0.1 (masks drawn inside them) against the
// CPU's unfused attention with the same stream (GQA, padding, a tensor-parallel head slice); then timings of fused vs unfused attention on the GPT-2 124M and 1.5B shapes
// (and the fused kernels with 16 documents per sequence). Exits 77 (skipped) without a visible GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/flash_attention.h"
#include "tessera/ops/rope.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::cuda_ok;
using gpu_test::kGuard;
using gpu_test::round_to;
using gpu_test::upload;
std::mt19937 rng(4321);
int failures = 0;

std::vector<float> randn(int64_t n, float stddev, DType t) { return gpu_test::random_normal(rng, n, stddev, t); }

// Leaves the device contents to the op under test: a NaN pattern, so an unwritten element shows.
std::unique_ptr<DeviceTensor> output(DType t, Shape shape) {
  auto d = std::make_unique<DeviceTensor>(t, std::move(shape), nullptr);
  cuda_ok(cudaMemset(d->base + kGuard, 0xFF, d->bytes), "poison");  // 0xFFFF.. is NaN in f32/bf16/f16
  return d;
}

std::vector<float> download(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}

// Thresholds on max|gpu - ref| / max|ref|. The reference sees the same rounded inputs, so the error
// is the kernel's own: P (and dS) rounded to the storage dtype before the tensor-core products
// (relative 2^-8 for bf16, 2^-11 for f16) plus the output's rounding (2^-9 / 2^-12 of the largest
// value). Forward: bf16 1e-2, f16 2e-3. Backward: dS = P (dP - D) cancels and is rounded again, and
// dq/dk sum over up to s keys/queries: twice the forward's. lse is fp32 from exact products: 1e-4.
// The unfused attention ("unfused_*": f32 cuBLAS, or bf16 scores and probs stored in bf16) has the
// ops parity suite's tolerances: f32 1e-4 forward, bf16 2e-2; backward 3x.
double tolerance(const std::string& what, DType t) {
  if (what.rfind("unfused_", 0) == 0) {
    const double forward = t == DType::f32 ? 1e-4 : 2e-2;
    return what == "unfused_out" || what == "unfused_probs" ? forward : 3 * forward;
  }
  if (what == "lse") return 1e-4;
  const double forward = t == DType::bf16 ? 1e-2 : 2e-3;
  return what == "out" ? forward : 2 * forward;
}

gpu_test::ParityTable results{"what dtype hn variant"};  // -> worst normalised error

// gpu/ref restricted to the entries where pick(i) is true; NaN/Inf classes must agree. The error is
// normalised by max(max|ref| over the picked entries, floor): dq and dk pass floor = 5% of max|dqkv|,
// because where every query sees a single key (s = 1) their true value is exactly 0 (a one-element
// softmax has no gradient) and both sides hold only rounding noise of dP - D.
template <typename Pick>
double compare(const std::string& what, DType t, int64_t hn, const std::string& variant, const std::string& config,
               const std::vector<float>& gpu,
               const std::vector<float>& ref, Pick pick, double floor = 0.0) {
  double max_ref = 0.0, max_err = 0.0;
  int special_mismatch = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!pick(i)) continue;
    const float r = ref[i], g = gpu[i];
    if (!std::isfinite(r) || !std::isfinite(g)) {
      const bool same = (std::isnan(r) && std::isnan(g)) || (std::isinf(r) && std::isinf(g) && (r > 0) == (g > 0));
      if (!same) ++special_mismatch;
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(double(r)));
    max_err = std::max(max_err, std::fabs(double(g) - double(r)));
  }
  const double denominator = std::max(max_ref, floor);
  const double err = denominator > 0 ? max_err / denominator : max_err;  // all-zero reference: absolute error
  const double tol = tolerance(what, t);
  const std::string key = what + " " + std::string(dtype_name(t)) + " hn" + std::to_string(hn) + " " + variant;
  if (!results.record(key, err, tol, err <= tol && special_mismatch == 0 && std::isfinite(err))) {
    ++failures;
    std::printf("FAIL %s %s: normalised error %.3g (tolerance %.3g; max|err| %.3g, max|ref| %.3g), %d NaN/Inf "
                "mismatches\n", key.c_str(), config.c_str(), err, tol, max_err, max_ref, special_mismatch);
  }
  return err;
}

enum class Variant { plain, alibi, rope, documents };
const char* variant_name(Variant v) {
  return v == Variant::alibi ? "alibi" : v == Variant::rope ? "rope" : v == Variant::documents ? "documents" : "plain";
}

struct Config {
  DType t;
  int64_t hn, s, b, na, ng;
  bool causal, padding;
  Variant variant = Variant::plain;
};

// Key padding: keys j with (7 j + bi) % 5 == 0 are masked; batch element 1 (or, with b = 1, key 0 of
// batch 0, which leaves causal query 0 without a key) masks everything: rows that see no key.
std::vector<uint8_t> make_mask(const Config& c) {
  std::vector<uint8_t> m(static_cast<size_t>(c.b * c.s));
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t j = 0; j < c.s; ++j) {
      bool attend = (7 * j + bi) % 5 != 0;
      if (c.b > 1 && bi == 1) attend = false;
      if (c.b == 1 && j == 0) attend = false;
      m[bi * c.s + j] = attend;
    }
  return m;
}

// Document ids [b, s] (data/document_masks.h numbering): a new document after tokens 4 and 5 (a
// one-token document) and after every token j with (j + 13 bi) % 90 == 60 (documents of 90 tokens,
// so at s = 1024 most key tiles of a query block hold other documents and are skipped).
std::vector<int32_t> make_documents(int64_t b, int64_t s) {
  std::vector<int32_t> ids(static_cast<size_t>(b * s));
  for (int64_t bi = 0; bi < b; ++bi) {
    int32_t document = 0;
    for (int64_t j = 0; j < s; ++j) {
      ids[static_cast<size_t>(bi * s + j)] = document;
      if (j == 4 || j == 5 || (j + 13 * bi) % 90 == 60) ++document;
    }
  }
  return ids;
}

void run_config(const Config& c, std::FILE* log) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn, out_cols = c.na * c.hn;
  char name[160];
  std::snprintf(name, sizeof(name), "%s %s hn=%lld s=%lld b=%lld na=%lld ng=%lld %s %s", variant_name(c.variant),
                std::string(dtype_name(c.t)).c_str(),
                static_cast<long long>(c.hn), static_cast<long long>(c.s), static_cast<long long>(c.b),
                static_cast<long long>(c.na), static_cast<long long>(c.ng), c.causal ? "causal" : "full",
                c.padding ? "padded" : "unpadded");
  auto qkv = randn(c.s * c.b * width, 1.0f, c.t), dout = randn(c.s * c.b * out_cols, 1.0f, c.t);
  std::vector<uint8_t> mask = make_mask(c);
  std::vector<int32_t> documents = make_documents(c.b, c.s);
  ops::AttentionParams p;
  p.num_heads = c.na, p.num_query_groups = c.ng, p.head_dim = c.hn, p.causal = c.causal;
  if (c.variant == Variant::alibi) p.alibi = true, p.alibi_heads = 2 * c.na, p.alibi_first_head = c.na;
  if (c.variant == Variant::rope) {  // RoPE'd inputs: q and k rotated (per-row positions), then rounded
    const int64_t hpg = c.na / c.ng, stride = (hpg + 2) * c.hn;
    std::vector<int32_t> positions(static_cast<size_t>(c.s * c.b));
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i / c.b + 3 * (i % c.b));
    const ops::RopeHeads q{0, hpg, c.hn, c.ng, stride}, k{hpg * c.hn, 1, c.hn, c.ng, stride};
    const Tensor rows(qkv.data(), DType::f32, {c.s, c.b, width}), pos(positions.data(), DType::i32, {c.s * c.b});
    ops::rope_forward_rows(rows, q, pos, 10000.0);
    ops::rope_forward_rows(rows, k, pos, 10000.0);
    for (float& x : qkv) x = round_to(x, c.t);
  }

  // GPU
  auto d_qkv = upload(qkv, c.t, {c.s, c.b, width});
  auto d_dout = upload(dout, c.t, {c.s, c.b, out_cols});
  DeviceTensor d_mask(DType::u8, {c.b, c.s}, mask.data());
  DeviceTensor d_documents(DType::i32, {c.b, c.s}, documents.data());
  if (c.variant == Variant::documents) p.document_ids = d_documents.tensor;
  auto d_out = output(c.t, {c.s, c.b, out_cols});
  auto d_lse = output(DType::f32, {c.b, c.na, c.s});
  auto d_dqkv = output(c.t, {c.s, c.b, width});
  const Tensor gpu_mask = c.padding ? d_mask.tensor : Tensor();
  if (!ops::flash_attention_supported(d_qkv->tensor, p)) {
    std::printf("FAIL %s: flash_attention_supported is false\n", name);
    ++failures;
    return;
  }
  ops::flash_attention_forward(d_qkv->tensor, gpu_mask, p, d_out->tensor, d_lse->tensor);
  ops::flash_attention_backward(d_dout->tensor, d_qkv->tensor, d_out->tensor, d_lse->tensor, gpu_mask, p,
                                d_dqkv->tensor);
  const auto g_out = download(*d_out, std::string("out ") + name);
  const auto g_lse = download(*d_lse, std::string("lse ") + name);
  const auto g_dqkv = download(*d_dqkv, std::string("dqkv ") + name);

  // CPU f32 reference on the same rounded inputs
  std::vector<float> r_out(g_out.size()), r_lse(g_lse.size()), r_dqkv(g_dqkv.size());
  const Tensor cpu_mask = c.padding ? Tensor(mask.data(), DType::u8, {c.b, c.s}) : Tensor();
  if (c.variant == Variant::documents) p.document_ids = Tensor(documents.data(), DType::i32, {c.b, c.s});
  ops::flash_attention_forward(cpu(qkv, {c.s, c.b, width}), cpu_mask, p, cpu(r_out, {c.s, c.b, out_cols}),
                               cpu(r_lse, {c.b, c.na, c.s}));
  ops::flash_attention_backward(cpu(dout, {c.s, c.b, out_cols}), cpu(qkv, {c.s, c.b, width}),
                                cpu(r_out, {c.s, c.b, out_cols}), cpu(r_lse, {c.b, c.na, c.s}), cpu_mask, p,
                                cpu(r_dqkv, {c.s, c.b, width}));

  const int64_t hpg = c.na / c.ng;
  auto column_kind = [&](size_t i) {  // 0: q, 1: k, 2: v
    const int64_t within = (static_cast<int64_t>(i) % width) % ((hpg + 2) * c.hn) / c.hn;
    return within < hpg ? 0 : within == hpg ? 1 : 2;
  };
  auto all = [](size_t) { return true; };
  const double e_out = compare("out", c.t, c.hn, variant_name(c.variant), name, g_out, r_out, all);
  const double e_lse = compare("lse", c.t, c.hn, variant_name(c.variant), name, g_lse, r_lse, all);
  double max_dqkv = 0.0;
  for (float x : r_dqkv) max_dqkv = std::max(max_dqkv, std::fabs(double(x)));
  const double floor = 0.05 * max_dqkv;
  const double e_dq =
      compare("dq", c.t, c.hn, variant_name(c.variant), name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 0; }, floor);
  const double e_dk =
      compare("dk", c.t, c.hn, variant_name(c.variant), name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 1; }, floor);
  const double e_dv = compare("dv", c.t, c.hn, variant_name(c.variant), name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 2; });
  std::fprintf(log, "%-58s out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", name, e_out, e_lse, e_dq, e_dk, e_dv);
}

// The unfused CUDA attention with document ids (and key padding, dropout) against the CPU attention on
// the same rounded inputs: out, probs (exact zeros where masked) and dqkv; dropout draws the CPU's masks.
void run_unfused_documents(DType t, int64_t s, int64_t b, int64_t na, int64_t ng, int64_t hn, bool causal, bool padding,
                           double dropout, std::FILE* log) {
  const int64_t width = (na + 2 * ng) * hn, out_cols = na * hn;
  char name[160];
  std::snprintf(name, sizeof(name), "unfused documents %s hn=%lld s=%lld b=%lld na=%lld ng=%lld %s %s dropout=%.1f",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(hn), static_cast<long long>(s),
                static_cast<long long>(b), static_cast<long long>(na), static_cast<long long>(ng),
                causal ? "causal" : "full", padding ? "padded" : "unpadded", dropout);
  const Shape qkv_shape{s, b, width}, out_shape{s, b, out_cols}, probs_shape{b, na, s, s};
  auto qkv = randn(shape_numel(qkv_shape), 1.0f, t), dout = randn(shape_numel(out_shape), 1.0f, t);
  std::vector<uint8_t> mask = make_mask({t, hn, s, b, na, ng, causal, padding});
  std::vector<int32_t> documents = make_documents(b, s);
  ops::AttentionParams p;
  p.num_heads = na, p.num_query_groups = ng, p.head_dim = hn, p.causal = causal, p.dropout = dropout;
  const RandomStream stream(11, 12);

  auto d_qkv = upload(qkv, t, qkv_shape);
  auto d_dout = upload(dout, t, out_shape);
  DeviceTensor d_mask(DType::u8, {b, s}, mask.data()), d_documents(DType::i32, {b, s}, documents.data());
  auto d_out = output(t, out_shape);
  auto d_probs = output(t, probs_shape);
  auto d_dqkv = output(t, qkv_shape);
  p.document_ids = d_documents.tensor;
  ops::attention_forward(d_qkv->tensor, padding ? d_mask.tensor : Tensor(), p, stream, d_out->tensor, d_probs->tensor);
  ops::attention_backward(d_dout->tensor, d_qkv->tensor, d_probs->tensor, p, stream, d_dqkv->tensor);
  const auto g_out = download(*d_out, std::string("out ") + name);
  const auto g_probs = download(*d_probs, std::string("probs ") + name);
  const auto g_dqkv = download(*d_dqkv, std::string("dqkv ") + name);

  std::vector<float> r_out(g_out.size()), r_probs(g_probs.size()), r_dqkv(g_dqkv.size());
  p.document_ids = Tensor(documents.data(), DType::i32, {b, s});
  const Tensor cpu_mask = padding ? Tensor(mask.data(), DType::u8, {b, s}) : Tensor();
  ops::attention_forward(cpu(qkv, qkv_shape), cpu_mask, p, stream, cpu(r_out, out_shape), cpu(r_probs, probs_shape));
  ops::attention_backward(cpu(dout, out_shape), cpu(qkv, qkv_shape), cpu(r_probs, probs_shape), p, stream,
                          cpu(r_dqkv, qkv_shape));
  auto all = [](size_t) { return true; };
  const char* variant = dropout > 0 ? "documents+dropout" : "documents";
  const double e_out = compare("unfused_out", t, hn, variant, name, g_out, r_out, all);
  const double e_probs = compare("unfused_probs", t, hn, variant, name, g_probs, r_probs, all);
  const double e_dqkv = compare("unfused_dqkv", t, hn, variant, name, g_dqkv, r_dqkv, all);
  int leaked = 0;  // a masked key (reference probability exactly 0) must be exactly 0 on the GPU too
  for (size_t i = 0; i < r_probs.size(); ++i) leaked += r_probs[i] == 0.0f && g_probs[i] != 0.0f;
  if (leaked) {
    std::printf("FAIL %s: %d masked probabilities are not 0\n", name, leaked);
    ++failures;
  }
  std::fprintf(log, "%-58s out %.2e probs %.2e dqkv %.2e\n", name, e_out, e_probs, e_dqkv);
}

// Flash attention with attention dropout (drawn inside the fused kernels) against the CPU's unfused
// attention with the same dropout stream (the reference masks), on the same rounded inputs: out and
// dq, dk, dv. tp_slice: this call's heads are heads [na, 2 na) of a 2 na-head dropout index space, as
// a tensor-parallel rank's are.
void run_flash_dropout(DType t, int64_t hn, int64_t s, int64_t b, int64_t na, int64_t ng, bool causal, bool padding,
                       bool tp_slice, std::FILE* log) {
  const int64_t width = (na + 2 * ng) * hn, out_cols = na * hn;
  char name[160];
  std::snprintf(name, sizeof(name), "flash dropout=0.1 %s hn=%lld s=%lld b=%lld na=%lld ng=%lld %s %s%s",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(hn), static_cast<long long>(s),
                static_cast<long long>(b), static_cast<long long>(na), static_cast<long long>(ng),
                causal ? "causal" : "full", padding ? "padded" : "unpadded", tp_slice ? " tp-slice" : "");
  const Shape qkv_shape{s, b, width}, out_shape{s, b, out_cols};
  auto qkv = randn(shape_numel(qkv_shape), 1.0f, t), dout = randn(shape_numel(out_shape), 1.0f, t);
  std::vector<uint8_t> mask = make_mask({t, hn, s, b, na, ng, causal, padding});
  ops::AttentionParams p;
  p.num_heads = na, p.num_query_groups = ng, p.head_dim = hn, p.causal = causal, p.dropout = 0.1;
  if (tp_slice) p.dropout_heads = 2 * na, p.dropout_first_head = na;
  const RandomStream stream(21, 22);

  auto d_qkv = upload(qkv, t, qkv_shape);
  auto d_dout = upload(dout, t, out_shape);
  DeviceTensor d_mask(DType::u8, {b, s}, mask.data());
  auto d_out = output(t, out_shape);
  auto d_lse = output(DType::f32, {b, na, s});
  auto d_dqkv = output(t, qkv_shape);
  const Tensor gpu_mask = padding ? d_mask.tensor : Tensor();
  if (!ops::flash_attention_supported(d_qkv->tensor, p)) {
    std::printf("FAIL %s: flash_attention_supported is false\n", name);
    ++failures;
    return;
  }
  ops::flash_attention_forward(d_qkv->tensor, gpu_mask, p, d_out->tensor, d_lse->tensor, &stream);
  ops::flash_attention_backward(d_dout->tensor, d_qkv->tensor, d_out->tensor, d_lse->tensor, gpu_mask, p,
                                d_dqkv->tensor, &stream);
  const auto g_out = download(*d_out, std::string("out ") + name);
  const auto g_dqkv = download(*d_dqkv, std::string("dqkv ") + name);

  std::vector<float> r_out(g_out.size()), r_probs(static_cast<size_t>(b * na * s * s)), r_dqkv(g_dqkv.size());
  const Shape probs_shape{b, na, s, s};
  const Tensor cpu_mask = padding ? Tensor(mask.data(), DType::u8, {b, s}) : Tensor();
  ops::attention_forward(cpu(qkv, qkv_shape), cpu_mask, p, stream, cpu(r_out, out_shape), cpu(r_probs, probs_shape));
  ops::attention_backward(cpu(dout, out_shape), cpu(qkv, qkv_shape), cpu(r_probs, probs_shape), p, stream,
                          cpu(r_dqkv, qkv_shape));
  const int64_t hpg = na / ng;
  auto column_kind = [&](size_t i) {  // 0: q, 1: k, 2: v
    const int64_t within = (static_cast<int64_t>(i) % width) % ((hpg + 2) * hn) / hn;
    return within < hpg ? 0 : within == hpg ? 1 : 2;
  };
  double max_dqkv = 0.0;
  for (float x : r_dqkv) max_dqkv = std::max(max_dqkv, std::fabs(double(x)));
  const double floor = 0.05 * max_dqkv;
  const double e_out = compare("out", t, hn, "dropout", name, g_out, r_out, [](size_t) { return true; });
  const double e_dq =
      compare("dq", t, hn, "dropout", name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 0; }, floor);
  const double e_dk =
      compare("dk", t, hn, "dropout", name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 1; }, floor);
  const double e_dv =
      compare("dv", t, hn, "dropout", name, g_dqkv, r_dqkv, [&](size_t i) { return column_kind(i) == 2; });
  std::fprintf(log, "%-58s out %.2e dq %.2e dk %.2e dv %.2e\n", name, e_out, e_dq, e_dk, e_dv);

  // The forward's record of its decisions (head_dim 64, seq a multiple of 4): its size, and the
  // backward reading it instead of drawing the decisions: out, dk and dv bitwise those of the run
  // above (dq's atomics add in any order: against the CPU), dq against the CPU.
  const int64_t words = ops::flash_attention_dropout_record_words(d_qkv->tensor, p);
  const int64_t tiles = (s + 63) / 64;
  const int64_t expected_words = hn == 64 && s % 4 == 0 ? b * na * tiles * tiles * 128 : 0;
  if (words != expected_words) {
    std::printf("FAIL %s: flash_attention_dropout_record_words %lld, expected %lld\n", name,
                static_cast<long long>(words), static_cast<long long>(expected_words));
    ++failures;
  }
  if (words == 0) return;
  auto d_record = output(DType::i32, {words});
  auto d_out2 = output(t, out_shape);
  auto d_lse2 = output(DType::f32, {b, na, s});
  auto d_dqkv2 = output(t, qkv_shape);
  ops::flash_attention_forward(d_qkv->tensor, gpu_mask, p, d_out2->tensor, d_lse2->tensor, &stream, d_record->tensor);
  ops::flash_attention_backward(d_dout->tensor, d_qkv->tensor, d_out2->tensor, d_lse2->tensor, gpu_mask, p,
                                d_dqkv2->tensor, &stream, d_record->tensor);
  const auto g_out2 = download(*d_out2, std::string("out (recorded) ") + name);
  const auto g_dqkv2 = download(*d_dqkv2, std::string("dqkv (recorded) ") + name);
  int64_t differ = 0;
  for (size_t i = 0; i < g_out.size(); ++i) differ += std::memcmp(&g_out[i], &g_out2[i], sizeof(float)) != 0;
  for (size_t i = 0; i < g_dqkv.size(); ++i)
    if (column_kind(i) != 0) differ += std::memcmp(&g_dqkv[i], &g_dqkv2[i], sizeof(float)) != 0;
  if (differ > 0) {
    std::printf("FAIL %s: with the forward's dropout record, %lld elements of out / dk / dv differ\n", name,
                static_cast<long long>(differ));
    ++failures;
  }
  const double e_dq2 = compare("dq", t, hn, "dropout-record", name, g_dqkv2, r_dqkv,
                               [&](size_t i) { return column_kind(i) == 0; }, floor);
  const double e_dk2 = compare("dk", t, hn, "dropout-record", name, g_dqkv2, r_dqkv,
                               [&](size_t i) { return column_kind(i) == 1; }, floor);
  std::fprintf(log, "%-58s recorded: dq %.2e dk %.2e, %lld differing out/dk/dv elements\n", name, e_dq2, e_dk2,
               static_cast<long long>(differ));
}

// ---- timing ------------------------------------------------------------------------------------

uint64_t hash64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
  return x;
}

std::unique_ptr<DeviceTensor> pseudo_random(DType t, Shape shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = (static_cast<float>(hash64(seed * 0x9E3779B97F4A7C15ULL + i) >> 40) / 16777216.0f - 0.5f) * 3.4f;
  return upload(v, t, std::move(shape));
}

template <typename F>
double median_ms(F&& f) {
  cudaStream_t stream = ops::cuda::CudaContext::get().stream();
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "event");
  cuda_ok(cudaEventCreate(&stop), "event");
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cuda_ok(cudaEventRecord(start, stream), "record");
    f();
    cuda_ok(cudaEventRecord(stop, stream), "record");
    cuda_ok(cudaEventSynchronize(stop), "sync");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[9] + ms[10]);
}

// documents > 0: the fused kernels with that many equal documents per sequence (tiles skipped).
// dropout > 0: the fused kernels with attention dropout (Philox inside the forward, which records its
// decisions for the backward where it can).
void time_shape(const char* label, int64_t b, int64_t na, int64_t s, int64_t hn, int64_t documents = 0,
                double dropout = 0.0) {
  const DType t = DType::bf16;
  const int64_t width = 3 * na * hn;
  ops::AttentionParams p;
  p.num_heads = na, p.num_query_groups = na, p.head_dim = hn, p.causal = true, p.dropout = dropout;
  const RandomStream dropout_stream(5, 6);
  auto qkv = pseudo_random(t, {s, b, width}, 1), dout = pseudo_random(t, {s, b, na * hn}, 2);
  auto out = output(t, {s, b, na * hn});
  auto lse = output(DType::f32, {b, na, s});
  auto dqkv = output(t, {s, b, width});
  std::vector<int32_t> ids(static_cast<size_t>(b * s));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = documents > 0 ? static_cast<int32_t>(static_cast<int64_t>(i) % s * documents / s) : 0;
  DeviceTensor d_ids(DType::i32, {b, s}, ids.data());
  if (documents > 0) p.document_ids = d_ids.tensor;
  // Attention dropout: with the forward's record of its decisions, as the training step runs it.
  const int64_t record_words = ops::flash_attention_dropout_record_words(qkv->tensor, p);
  auto record = record_words > 0 ? output(DType::i32, {record_words}) : nullptr;
  const Tensor record_tensor = record ? record->tensor : Tensor();
  const double fwd_flops = 4.0 * b * na * s * s * hn / 2, bwd_flops = 2.5 * fwd_flops;
  const double f_ms = median_ms([&] {
    ops::flash_attention_forward(qkv->tensor, Tensor(), p, out->tensor, lse->tensor, &dropout_stream, record_tensor);
  });
  const double b_ms = median_ms([&] {
    ops::flash_attention_backward(dout->tensor, qkv->tensor, out->tensor, lse->tensor, Tensor(), p, dqkv->tensor,
                                  &dropout_stream, record_tensor);
  });
  download(*dqkv, std::string("timing dqkv ") + label);
  double uf_ms = -1, ub_ms = -1;
  if (documents > 0 || dropout > 0) {  // the same causal FLOPs counted: the skipped tiles show as a higher rate
    std::printf("%-34s fused   fwd %7.3f ms %6.1f TFLOP/s   bwd %7.3f ms %6.1f TFLOP/s (causal-equivalent)\n", label,
                f_ms, fwd_flops / f_ms * 1e-9, b_ms, bwd_flops / b_ms * 1e-9);
    std::fflush(stdout);
    return;
  }
  {
    auto probs = output(t, {b, na, s, s});
    const RandomStream unused(1, 2);
    uf_ms = median_ms([&] { ops::cuda::attention_forward(qkv->tensor, Tensor(), p, unused, out->tensor, probs->tensor); });
    ub_ms = median_ms([&] { ops::cuda::attention_backward(dout->tensor, qkv->tensor, probs->tensor, p, unused, dqkv->tensor); });
    download(*dqkv, std::string("timing unfused dqkv ") + label);
  }
  std::printf("%-34s fused   fwd %7.3f ms %6.1f TFLOP/s   bwd %7.3f ms %6.1f TFLOP/s\n", label, f_ms,
              fwd_flops / f_ms * 1e-9, b_ms, bwd_flops / b_ms * 1e-9);
  std::printf("%-34s unfused fwd %7.3f ms %6.1f TFLOP/s   bwd %7.3f ms %6.1f TFLOP/s\n", label, uf_ms,
              fwd_flops / uf_ms * 1e-9, ub_ms, bwd_flops / ub_ms * 1e-9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (!gpu_test::device_visible()) return 77;
  gpu_test::honour_deterministic_switch();
  // argv[1]: optional file for the per-configuration error table (default: stdout); argv[2] = "quick":
  // no timings and s <= 257 only (for runs under compute-sanitizer); "dropout": only the fused
  // kernels' attention-dropout cases; "timings": only the timings (for A/B runs of kernel variants).
  std::FILE* log = argc > 1 ? std::fopen(argv[1], "w") : stdout;
  if (!log) log = stdout;
  const bool dropout_only = argc > 2 && std::string(argv[2]) == "dropout";
  const bool quick = dropout_only || (argc > 2 && std::string(argv[2]) == "quick");
  const bool timings_only = argc > 2 && std::string(argv[2]) == "timings";
  const bool ran = gpu_test::ran_without_exception([&] {
    std::printf("timings (bf16, causal, s=1024, hn=64; median of 20 after 3 warm-up; FLOPs fwd 4 b na s^2 hn / 2, "
                "bwd 2.5x)\n");
    if (!quick) {
      time_shape("GPT-2 124M  b=16 na=ng=12", 16, 12, 1024, 64);
      time_shape("GPT-2 1.5B  b=8  na=ng=25", 8, 25, 1024, 64);
      time_shape("GPT-2 124M  16 documents", 16, 12, 1024, 64, 16);
      time_shape("GPT-2 124M  dropout 0.1", 16, 12, 1024, 64, 0, 0.1);
    }
    if (timings_only) return;
    const int64_t heads[][2] = {{4, 4}, {8, 2}, {4, 1}};
    if (!dropout_only)
    for (DType t : {DType::bf16, DType::f16})
      for (int64_t hn : {64, 128})
        for (int64_t s : {1, 17, 128, 257, 1024})
          for (int64_t b : {1, 3})
            if (!quick || s <= 257)
            for (const auto& h : heads)
              for (bool causal : {true, false})
                for (bool padding : {false, true})
                  for (Variant v : {Variant::plain, Variant::alibi, Variant::rope, Variant::documents})
                    run_config({t, hn, s, b, h[0], h[1], causal, padding, v}, log);
    if (!dropout_only)
    for (DType t : {DType::f32, DType::bf16})
      for (int64_t s : {17, 128, 257})
        for (bool causal : {true, false})
          for (bool padding : {false, true})
            for (double dropout : {0.0, 0.1}) run_unfused_documents(t, s, 3, 4, 2, 64, causal, padding, dropout, log);
    for (DType t : {DType::bf16, DType::f16})
      for (int64_t hn : {64, 128})
        for (int64_t s : {17, 128, 257, 260})
          for (bool causal : {true, false})
            for (bool padding : {false, true}) {
              run_flash_dropout(t, hn, s, 2, 4, 2, causal, padding, false, log);
              if (s == 128) run_flash_dropout(t, hn, s, 2, 4, 4, causal, padding, true, log);
            }
  });
  if (!ran) return 1;
  if (timings_only) return 0;
  if (log != stdout) std::fclose(log);
  return results.summarise("flash attention parity", failures);
}
