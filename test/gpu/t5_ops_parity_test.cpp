// T5 op parity (label gpu): the CUDA biased attention (per-head cuBLASLt GEMMs + the biased
// softmax kernels of kernels/t5.cu; self-attention causal / bidirectional and cross-attention with
// sq != sk, key padding, attention dropout, the bias gradient), the relative position bias gather /
// scatter-add, ReLU and GeGLU, against the CPU reference on the same rounded inputs (f32, bf16).
// Exits 77 (skipped) without a visible GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/biased_attention.h"
#include "tessera/ops/relative_position_bias.h"
#include "tessera/ops/swiglu.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::upload;
std::mt19937 rng(1357);
int failures = 0;

gpu_test::ParityTable results;

std::vector<float> download(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}
double base_tolerance(DType t) { return t == DType::f32 ? 1e-4 : t == DType::bf16 ? 2e-2 : 4e-3; }

void compare(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref,
             double factor) {
  const double tol = base_tolerance(t) * factor;
  const gpu_test::NormalisedError m = gpu_test::normalised_error(gpu, ref, t, 0.0);
  const std::string key = op + " " + std::string(dtype_name(t));
  if (!results.record(key, m.error, tol, m.error <= tol && !m.special_mismatches && std::isfinite(m.error))) {
    ++failures;
    std::printf("FAIL %s: normalised error %.3g (tolerance %.3g), %d NaN/Inf mismatches\n", key.c_str(), m.error, tol,
                m.special_mismatches);
  }
}

const DType kDtypes[] = {DType::f32, DType::bf16};

void test_activations() {
  for (DType t : kDtypes)
    for (int64_t n : {int64_t{7}, int64_t{4096}}) {
      const int64_t f = 96;
      auto in = gpu_test::random_normal(rng, n * 2 * f, 2.0f, t);
      auto dy = gpu_test::random_normal(rng, n * f, 1.0f, t);
      auto d_in = upload(in, t, {n, 2 * f});
      auto d_dy = upload(dy, t, {n, f});
      DeviceTensor d_out(t, {n, f}, nullptr), d_din(t, {n, 2 * f}, nullptr);
      ops::geglu_forward(d_in->tensor, d_out.tensor);
      ops::geglu_backward(d_dy->tensor, d_in->tensor, d_din.tensor);
      std::vector<float> out(static_cast<size_t>(n * f)), din(static_cast<size_t>(n * 2 * f));
      ops::geglu_forward(cpu(in, {n, 2 * f}), cpu(out, {n, f}));
      ops::geglu_backward(cpu(dy, {n, f}), cpu(in, {n, 2 * f}), cpu(din, {n, 2 * f}));
      compare("geglu_forward", t, download(d_out, "geglu_forward"), out, 1);
      compare("geglu_backward", t, download(d_din, "geglu_backward"), din, 2);
      auto r_in = upload(dy, t, {n, f});
      DeviceTensor r_out(t, {n, f}, nullptr), r_din(t, {n, f}, nullptr);
      ops::activation_forward(ops::Activation::relu, r_in->tensor, r_out.tensor);
      ops::activation_backward(ops::Activation::relu, d_dy->tensor, r_in->tensor, r_din.tensor);
      std::vector<float> ro(static_cast<size_t>(n * f)), rd(static_cast<size_t>(n * f));
      ops::activation_forward(ops::Activation::relu, cpu(dy, {n, f}), cpu(ro, {n, f}));
      ops::activation_backward(ops::Activation::relu, cpu(dy, {n, f}), cpu(dy, {n, f}), cpu(rd, {n, f}));
      compare("relu_forward", t, download(r_out, "relu_forward"), ro, 1);
      compare("relu_backward", t, download(r_din, "relu_backward"), rd, 1);
    }
}

void test_relative_bias() {
  for (DType t : kDtypes) {
    const int64_t nb = 32, nh = 6, sq = 40, sk = 72;
    auto weight = gpu_test::random_normal(rng, nb * nh, 1.0f, t);
    auto dbias = gpu_test::random_normal(rng, nh * sq * sk, 1.0f, t);
    std::vector<int32_t> buckets = ops::relative_position_buckets(sq, sk, 3, false, nb, 128);
    DeviceTensor d_buckets(DType::i32, {sq, sk}, buckets.data());
    Tensor c_buckets(buckets.data(), DType::i32, {sq, sk});
    auto d_w = upload(weight, t, {nb, nh});
    auto d_db = upload(dbias, t, {nh, sq, sk});
    std::vector<float> zeros(static_cast<size_t>(nb * nh), 0.0f);
    auto d_dw = upload(zeros, DType::f32, {nb, nh});
    DeviceTensor d_out(t, {nh, sq, sk}, nullptr);
    ops::relative_position_bias_forward(d_w->tensor, d_buckets.tensor, d_out.tensor);
    ops::relative_position_bias_backward(d_db->tensor, d_buckets.tensor, d_dw->tensor);
    std::vector<float> out(static_cast<size_t>(nh * sq * sk)), dw(zeros);
    ops::relative_position_bias_forward(cpu(weight, {nb, nh}), c_buckets, cpu(out, {nh, sq, sk}));
    ops::relative_position_bias_backward(cpu(dbias, {nh, sq, sk}), c_buckets, cpu(dw, {nb, nh}));
    compare("relative_position_bias_forward", t, download(d_out, "bias forward"), out, 1);
    compare("relative_position_bias_backward", DType::f32, download(*d_dw, "bias backward"), dw, 1);
  }
}

void test_biased_attention() {
  struct Case { int64_t sq, sk, b, nh, hn; bool causal, padded, with_bias; double dropout; };
  const std::vector<Case> cases = {{17, 17, 2, 4, 32, true, true, true, 0.0},  {64, 64, 3, 6, 64, false, true, true, 0.0},
                                   {12, 40, 2, 4, 16, false, true, false, 0.0}, {33, 33, 2, 2, 64, true, false, true, 0.1},
                                   {128, 128, 2, 12, 64, false, true, true, 0.0}};
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      const int64_t w = c.nh * c.hn;
      auto q = gpu_test::random_normal(rng, c.sq * c.b * w, 0.5f, t);
      auto k = gpu_test::random_normal(rng, c.sk * c.b * w, 0.5f, t);
      auto v = gpu_test::random_normal(rng, c.sk * c.b * w, 1.0f, t);
      auto bias = gpu_test::random_normal(rng, c.nh * c.sq * c.sk, 1.0f, t);
      auto dout = gpu_test::random_normal(rng, c.sq * c.b * w, 1.0f, t);
      std::vector<uint8_t> pad(static_cast<size_t>(c.b * c.sk), 1);
      if (c.padded)
        for (int64_t j = c.sk - 3; j < c.sk; ++j) pad[static_cast<size_t>(j)] = 0;
      DeviceTensor d_pad(DType::u8, {c.b, c.sk}, pad.data());
      Tensor c_pad(pad.data(), DType::u8, {c.b, c.sk});
      ops::BiasedAttentionParams p;
      p.batch = c.b, p.num_heads = c.nh, p.head_dim = c.hn, p.causal = c.causal, p.dropout = c.dropout;
      p.dropout_heads = 2 * c.nh, p.dropout_first_head = c.nh;  // a TP rank's heads
      const RandomStream stream(11, 22);
      auto d_q = upload(q, t, {c.sq * c.b, w});
      auto d_k = upload(k, t, {c.sk * c.b, w});
      auto d_v = upload(v, t, {c.sk * c.b, w});
      auto d_bias = upload(bias, t, {c.nh, c.sq, c.sk});
      auto d_dout = upload(dout, t, {c.sq * c.b, w});
      std::vector<float> zero_bias(bias.size(), 0.0f);
      auto d_dbias = upload(zero_bias, t, {c.nh, c.sq, c.sk});
      DeviceTensor d_out(t, {c.sq * c.b, w}, nullptr), d_probs(t, {c.b, c.nh, c.sq, c.sk}, nullptr);
      DeviceTensor d_dq(t, {c.sq * c.b, w}, nullptr), d_dk(t, {c.sk * c.b, w}, nullptr), d_dv(t, {c.sk * c.b, w}, nullptr);
      ops::biased_attention_forward(d_q->tensor, d_k->tensor, d_v->tensor, c.with_bias ? d_bias->tensor : Tensor(),
                                    c.padded ? d_pad.tensor : Tensor(), p, stream, d_out.tensor, d_probs.tensor);
      ops::biased_attention_backward(d_dout->tensor, d_q->tensor, d_k->tensor, d_v->tensor, d_probs.tensor, p, stream,
                                     d_dq.tensor, d_dk.tensor, d_dv.tensor, c.with_bias ? d_dbias->tensor : Tensor());
      std::vector<float> out(q.size()), probs(static_cast<size_t>(c.b * c.nh * c.sq * c.sk)), dq(q.size()),
          dk(k.size()), dv(v.size()), dbias(zero_bias);
      ops::biased_attention_forward(cpu(q, {c.sq * c.b, w}), cpu(k, {c.sk * c.b, w}), cpu(v, {c.sk * c.b, w}),
                                    c.with_bias ? cpu(bias, {c.nh, c.sq, c.sk}) : Tensor(), c.padded ? c_pad : Tensor(),
                                    p, stream, cpu(out, {c.sq * c.b, w}), cpu(probs, {c.b, c.nh, c.sq, c.sk}));
      ops::biased_attention_backward(cpu(dout, {c.sq * c.b, w}), cpu(q, {c.sq * c.b, w}), cpu(k, {c.sk * c.b, w}),
                                     cpu(v, {c.sk * c.b, w}), cpu(probs, {c.b, c.nh, c.sq, c.sk}), p, stream,
                                     cpu(dq, {c.sq * c.b, w}), cpu(dk, {c.sk * c.b, w}), cpu(dv, {c.sk * c.b, w}),
                                     c.with_bias ? cpu(dbias, {c.nh, c.sq, c.sk}) : Tensor());
      compare("biased_attention_out", t, download(d_out, "out"), out, 1);
      compare("biased_attention_probs", t, download(d_probs, "probs"), probs, 1);
      compare("biased_attention_dq", t, download(d_dq, "dq"), dq, 3);
      compare("biased_attention_dk", t, download(d_dk, "dk"), dk, 3);
      compare("biased_attention_dv", t, download(d_dv, "dv"), dv, 3);
      if (c.with_bias) compare("biased_attention_dbias", t, download(*d_dbias, "dbias"), dbias, 3);
    }
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  const bool ran = gpu_test::ran_without_exception([] {
    test_activations();
    test_relative_bias();
    test_biased_attention();
  });
  return ran ? results.summarise("t5 ops parity", failures) : 1;
}
