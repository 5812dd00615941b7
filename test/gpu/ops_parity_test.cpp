// CUDA op parity suite (label gpu): every CUDA op against its CPU reference on random inputs over a
// grid of shapes and dtypes (f32, bf16, f16; the CPU reference runs in f32 on the same rounded
// inputs), with per-op normalised error thresholds, NaN/Inf agreement, exact dropout-mask agreement
// and guard bytes around every device output. Exits 77 (skipped) without a visible GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/adamw.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/cuda/gemm_cuda.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/deterministic_mode.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/layernorm.h"
#include "tessera/ops/linear.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::cuda_ok;
using gpu_test::round_to;
using gpu_test::upload;
std::mt19937 rng(1234);
int failures = 0;

std::vector<float> randn(int64_t n, float stddev, DType t, float mean = 0.0f) {
  return gpu_test::random_normal(rng, n, stddev, t, mean);
}

std::vector<float> download(const DeviceTensor& d, const char* what) { return gpu_test::download_checked(d, what, failures); }

gpu_test::ParityTable results;  // "op dtype" -> worst normalised error

double base_tolerance(DType t) { return t == DType::f32 ? 1e-4 : t == DType::bf16 ? 2e-2 : 4e-3; }

// Normalised error max|gpu - ref| / max|ref| over finite entries; NaN/Inf classes must agree after
// rounding the reference to the dtype (so an f16 overflow to Inf is expected on both sides).
void compare(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref,
             double factor, DType output_dtype) {
  // The output's own rounding bounds the error too (a converting copy f32 -> bf16 is bf16-accurate).
  const double tol = std::max(base_tolerance(t), base_tolerance(output_dtype)) * factor;
  const gpu_test::NormalisedError measured = gpu_test::normalised_error(gpu, ref, output_dtype);
  const double err = measured.error;
  const int special_mismatch = measured.special_mismatches;
  const std::string key = op + " " + std::string(dtype_name(t));
  if (!results.record(key, err, tol, err <= tol && !special_mismatch && std::isfinite(err))) {
    ++failures;
    std::printf("FAIL %s: normalised error %.3g (tolerance %.3g), %d NaN/Inf mismatches, %zu elements\n", key.c_str(),
                err, tol, special_mismatch, ref.size());
  }
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// ---------------------------------------------------------------------------------------------
void test_gelu() {
  for (DType t : kDtypes)
    for (Shape shape : {Shape{7}, Shape{33, 65}, Shape{4, 1000}, Shape{64, 3072}}) {
      const int64_t n = shape_numel(shape);
      auto x = randn(n, 2.0f, t), dy = randn(n, 1.0f, t);
      x[0] = NAN;
      if (n > 3) x[3] = INFINITY;
      std::unique_ptr<DeviceTensor> dx_in(upload(x, t, shape)), ddy(upload(dy, t, shape)), dout(upload(x, t, shape)),
          ddin(upload(x, t, shape));
      ops::gelu_forward(dx_in->tensor, dout->tensor);
      ops::gelu_backward(ddy->tensor, dx_in->tensor, ddin->tensor);
      std::vector<float> ref_out(n), ref_din(n);
      ops::gelu_forward(cpu(x, shape), cpu(ref_out, shape));
      ops::gelu_backward(cpu(dy, shape), cpu(x, shape), cpu(ref_din, shape));
      compare("gelu_forward", t, download(*dout, "gelu_forward"), ref_out, 1, t);
      compare("gelu_backward", t, download(*ddin, "gelu_backward"), ref_din, 1, t);
      // fused bias + GeLU against add + GeLU on the CPU
      const int64_t cols = shape.back();
      auto bias = randn(cols, 1.0f, t);
      std::unique_ptr<DeviceTensor> dbias(upload(bias, t, {cols})), dfused(upload(x, t, shape));
      ops::cuda::bias_gelu_forward(dx_in->tensor, dbias->tensor, dfused->tensor);
      std::vector<float> xb(n), ref_fused(n);
      for (int64_t i = 0; i < n; ++i) xb[i] = x[i] + bias[i % cols];
      ops::gelu_forward(cpu(xb, shape), cpu(ref_fused, shape));
      compare("bias_gelu_forward", t, download(*dfused, "bias_gelu_forward"), ref_fused, 1, t);
    }
}

void test_dropout() {
  for (DType t : kDtypes)
    for (double p : {0.0, 0.1, 0.5})
      for (int64_t n : {int64_t(1), int64_t(1000), int64_t(70001)}) {
        auto x = randn(n, 1.0f, t, 3.0f);  // mean 3: no zero inputs, so zeros mark dropped elements
        const RandomStream stream(42, mix_stream(stream_id("dropout.test"), 7));
        const uint64_t offset = 12345;
        std::unique_ptr<DeviceTensor> din(upload(x, t, {n})), dout(upload(x, t, {n})), dback(upload(x, t, {n}));
        ops::dropout_forward(din->tensor, p, stream, offset, dout->tensor);
        ops::dropout_backward(din->tensor, p, stream, offset, dback->tensor);
        std::vector<float> ref(n);
        ops::dropout_forward(cpu(x, {n}), p, stream, offset, cpu(ref, {n}));
        const auto g = download(*dout, "dropout_forward"), gb = download(*dback, "dropout_backward");
        int64_t mask_mismatch = 0;
        for (int64_t i = 0; i < n; ++i) mask_mismatch += (g[i] == 0.0f) != (ref[i] == 0.0f) || (gb[i] == 0.0f) != (ref[i] == 0.0f);
        if (!results.record("dropout_mask " + std::string(dtype_name(t)), 0, 0, !mask_mismatch)) {
          std::printf("FAIL dropout %s p=%g n=%lld: %lld mask mismatches vs CPU Philox\n", std::string(dtype_name(t)).c_str(),
                      p, (long long)n, (long long)mask_mismatch);
          ++failures;
        }
        compare("dropout_forward", t, g, ref, 1, t);
        compare("dropout_backward", t, gb, ref, 1, t);
      }
}

void test_elementwise() {
  for (DType t : kDtypes)
    for (int64_t n : {int64_t(5), int64_t(4097), int64_t(300000)}) {
      auto a = randn(n, 1.0f, t), b = randn(n, 1.0f, t);
      a[0] = NAN;
      std::unique_ptr<DeviceTensor> da(upload(a, t, {n})), db(upload(b, t, {n})), dout(upload(b, t, {n}));
      ops::add(da->tensor, db->tensor, dout->tensor);
      std::vector<float> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
      compare("add", t, download(*dout, "add"), ref, 1, t);
      ops::add_inplace(db->tensor, da->tensor);
      compare("add_inplace", t, download(*db, "add_inplace"), ref, 1, t);
      ops::scale_inplace(da->tensor, -0.37);
      std::vector<float> scaled(a);
      ops::scale_inplace(cpu(scaled, {n}), -0.37);
      compare("scale_inplace", t, download(*da, "scale_inplace"), scaled, 1, t);
      ops::fill(dout->tensor, 1.625);
      compare("fill", t, download(*dout, "fill"), std::vector<float>(n, 1.625f), 1, t);
      for (DType to : kDtypes) {
        std::unique_ptr<DeviceTensor> dc(upload(std::vector<float>(n, 0.0f), to, {n}));
        ops::copy(da->tensor, dc->tensor);
        compare("copy_to_" + std::string(dtype_name(to)), t, download(*dc, "copy"), scaled, 1, to);
      }
      auto s = randn(n, 1.0f, t);
      std::unique_ptr<DeviceTensor> ds(upload(s, t, {n}));
      const double gpu = ops::sum_of_squares(ds->tensor);
      const double ref_sum = ops::sum_of_squares(cpu(s, {n}));
      compare("sum_of_squares", t, {static_cast<float>(gpu)}, {static_cast<float>(ref_sum)}, 0.1, DType::f32);
    }
}

void test_embedding() {
  for (DType t : kDtypes)
    for (auto [vocab, hidden, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{5, 3, 9}, {50, 24, 37}, {1000, 768, 512}}) {
      auto table = randn(vocab * hidden, 1.0f, t), dout = randn(n * hidden, 1.0f, t);
      std::vector<int32_t> ids(n);
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
      for (auto& id : ids) id = pick(rng) % std::max<int32_t>(1, static_cast<int32_t>(vocab / 2));  // repeats
      DeviceTensor dids(DType::i32, {n}, ids.data());
      std::unique_ptr<DeviceTensor> dtable(upload(table, t, {vocab, hidden})), dout_d(upload(dout, t, {n, hidden})),
          dres(upload(std::vector<float>(n * hidden), t, {n, hidden}));
      ops::embedding_forward(dids.tensor, dtable->tensor, dres->tensor);
      std::vector<float> ref(n * hidden);
      Tensor cids(ids.data(), DType::i32, {n});
      ops::embedding_forward(cids, cpu(table, {vocab, hidden}), cpu(ref, {n, hidden}));
      compare("embedding_forward", t, download(*dres, "embedding_forward"), ref, 1, t);
      for (DType g : {DType::f32, t}) {  // fp32 main grad, or the table dtype
        auto init = randn(vocab * hidden, 0.5f, g);
        std::unique_ptr<DeviceTensor> dgrad(upload(init, g, {vocab, hidden}));
        ops::embedding_backward(dids.tensor, dout_d->tensor, dgrad->tensor);
        std::vector<float> ref_grad(init);
        ops::embedding_backward(cids, cpu(dout, {n, hidden}), cpu(ref_grad, {vocab, hidden}));
        compare(std::string("embedding_backward_grad_") + std::string(dtype_name(g)), t,
                download(*dgrad, "embedding_backward"), ref_grad, g == DType::f32 ? 1 : 3, g);
      }
    }
}

void test_layernorm() {
  for (DType t : kDtypes)
    for (auto [rows, hidden] : std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {37, 96}, {128, 768}, {20, 1600}, {9, 8192}, {300, 1024},
                                                                          {2051, 768}, {700, 1600}, {513, 2048}, {4000, 40}}) {
      auto x = randn(rows * hidden, 1.5f, t, 0.3f), w = randn(hidden, 0.5f, t, 1.0f), b = randn(hidden, 0.2f, t),
           dy = randn(rows * hidden, 1.0f, t);
      if (rows > 2) x[hidden + 1] = NAN;  // row 1 becomes NaN on both sides
      const Shape s{rows, hidden};
      std::unique_ptr<DeviceTensor> dx(upload(x, t, s)), dw(upload(w, t, {hidden})), db(upload(b, t, {hidden})),
          dy_d(upload(dy, t, s)), dout(upload(x, t, s)), dmean(upload(std::vector<float>(rows), DType::f32, {rows})),
          drstd(upload(std::vector<float>(rows), DType::f32, {rows})), ddin(upload(x, t, s));
      ops::layernorm_forward(dx->tensor, dw->tensor, db->tensor, 1e-5, dout->tensor, dmean->tensor, drstd->tensor);
      std::vector<float> ref_out(rows * hidden), mean(rows), rstd(rows);
      ops::layernorm_forward(cpu(x, s), cpu(w, {hidden}), cpu(b, {hidden}), 1e-5, cpu(ref_out, s), cpu(mean, {rows}),
                             cpu(rstd, {rows}));
      compare("layernorm_forward", t, download(*dout, "layernorm_forward"), ref_out, 1, t);
      compare("layernorm_rstd", t, download(*drstd, "layernorm_forward rstd"), rstd, 1, DType::f32);
      auto gw = randn(hidden, 0.1f, DType::f32), gb = randn(hidden, 0.1f, DType::f32);
      std::unique_ptr<DeviceTensor> dgw(upload(gw, DType::f32, {hidden})), dgb(upload(gb, DType::f32, {hidden}));
      ops::layernorm_backward(dy_d->tensor, dx->tensor, dw->tensor, dmean->tensor, drstd->tensor, ddin->tensor,
                              dgw->tensor, dgb->tensor);
      std::vector<float> ref_din(rows * hidden), ref_gw(gw), ref_gb(gb);
      ops::layernorm_backward(cpu(dy, s), cpu(x, s), cpu(w, {hidden}), cpu(mean, {rows}), cpu(rstd, {rows}),
                              cpu(ref_din, s), cpu(ref_gw, {hidden}), cpu(ref_gb, {hidden}));
      compare("layernorm_backward_din", t, download(*ddin, "layernorm_backward"), ref_din, 2, t);
      compare("layernorm_backward_dweight", t, download(*dgw, "layernorm_backward dweight"), ref_gw, 2, DType::f32);
      compare("layernorm_backward_dbias", t, download(*dgb, "layernorm_backward dbias"), ref_gb, 2, DType::f32);
      // With a residual branch's gradient added in the same pass, din aliasing dout (in place).
      auto residual = randn(rows * hidden, 1.0f, t);
      std::unique_ptr<DeviceTensor> dres(upload(residual, t, s)), dinplace(upload(dy, t, s));
      ops::layernorm_backward(dinplace->tensor, dx->tensor, dw->tensor, dmean->tensor, drstd->tensor, dinplace->tensor,
                              dgw->tensor, dgb->tensor, dres->tensor);
      std::vector<float> ref_res_din(dy);
      ops::layernorm_backward(cpu(ref_res_din, s), cpu(x, s), cpu(w, {hidden}), cpu(mean, {rows}), cpu(rstd, {rows}),
                              cpu(ref_res_din, s), cpu(ref_gw, {hidden}), cpu(ref_gb, {hidden}), cpu(residual, s));
      compare("layernorm_backward_residual_din", t, download(*dinplace, "layernorm_backward residual"), ref_res_din, 2, t);
    }
}

void test_linear() {
  for (DType t : kDtypes)
    for (auto [rows, in_f, out_f] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{5, 7, 3}, {64, 96, 80}, {256, 128, 384}, {512, 768, 2304},
                                                                                       {1, 1600, 4800}, {3, 6400, 1600}, {8, 72, 40}, {2, 1032, 17},
                                                                                       {4096, 256, 768}}) {
      auto x = randn(rows * in_f, 1.0f, t), w = randn(out_f * in_f, 0.1f, t), b = randn(out_f, 0.5f, t),
           dy = randn(rows * out_f, 1.0f, t);
      std::unique_ptr<DeviceTensor> dx(upload(x, t, {rows, in_f})), dw(upload(w, t, {out_f, in_f})), db(upload(b, t, {out_f})),
          dy_d(upload(dy, t, {rows, out_f})), dout(upload(dy, t, {rows, out_f})), ddin(upload(x, t, {rows, in_f}));
      ops::linear_forward(dx->tensor, dw->tensor, db->tensor, dout->tensor);
      std::vector<float> ref_out(rows * out_f);
      ops::linear_forward(cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), cpu(b, {out_f}), cpu(ref_out, {rows, out_f}));
      compare("linear_forward", t, download(*dout, "linear_forward"), ref_out, 1, t);
      // With a residual added in the GEMM (beta = 1): the CPU's f32 sum rounded once.
      auto res = randn(rows * out_f, 2.0f, t);
      std::unique_ptr<DeviceTensor> dres(upload(res, t, {rows, out_f})), dres_out(upload(dy, t, {rows, out_f}));
      ops::linear_residual_forward(dx->tensor, dw->tensor, db->tensor, dres->tensor, dres_out->tensor);
      std::vector<float> ref_res_out(rows * out_f);
      ops::linear_residual_forward(cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), cpu(b, {out_f}), cpu(res, {rows, out_f}),
                                   cpu(ref_res_out, {rows, out_f}));
      compare("linear_residual_forward", t, download(*dres_out, "linear_residual_forward"), ref_res_out, 1, t);
      auto gw = randn(out_f * in_f, 1.0f, DType::f32), gb = randn(out_f, 1.0f, DType::f32);  // main grads (beta = 1)
      std::unique_ptr<DeviceTensor> dgw(upload(gw, DType::f32, {out_f, in_f})), dgb(upload(gb, DType::f32, {out_f}));
      ops::linear_backward(dy_d->tensor, dx->tensor, dw->tensor, ddin->tensor, dgw->tensor, dgb->tensor);
      std::vector<float> ref_din(rows * in_f), ref_gw(gw), ref_gb(gb);
      ops::linear_backward(cpu(dy, {rows, out_f}), cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), cpu(ref_din, {rows, in_f}),
                           cpu(ref_gw, {out_f, in_f}), cpu(ref_gb, {out_f}));
      compare("linear_backward_din", t, download(*ddin, "linear_backward din"), ref_din, 1, t);
      compare("linear_backward_dweight_f32", t, download(*dgw, "linear_backward dweight"), ref_gw, 1, DType::f32);
      compare("linear_backward_dbias_f32", t, download(*dgb, "linear_backward dbias"), ref_gb, 1, DType::f32);
      if (t != DType::f32) {  // weight / bias gradients in the storage dtype, accumulating (beta = 1)
        auto hw = randn(out_f * in_f, 1.0f, t), hb = randn(out_f, 1.0f, t);
        std::unique_ptr<DeviceTensor> dhw(upload(hw, t, {out_f, in_f})), dhb(upload(hb, t, {out_f}));
        ops::linear_backward(dy_d->tensor, dx->tensor, dw->tensor, Tensor(), dhw->tensor, dhb->tensor);
        std::vector<float> ref_hw(hw), ref_hb(hb);
        ops::linear_backward(cpu(dy, {rows, out_f}), cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), Tensor(),
                             cpu(ref_hw, {out_f, in_f}), cpu(ref_hb, {out_f}));
        compare("linear_backward_dweight_storage", t, download(*dhw, "linear_backward dweight"), ref_hw, 1, t);
        compare("linear_backward_dbias_storage", t, download(*dhb, "linear_backward dbias"), ref_hb, 1, t);
      }
      // matmul_nt accumulating into an output of the storage dtype
      auto c0 = randn(rows * out_f, 1.0f, t);
      std::unique_ptr<DeviceTensor> dc(upload(c0, t, {rows, out_f}));
      ops::matmul_nt(dx->tensor, dw->tensor, dc->tensor, true);
      std::vector<float> ref_c(c0);
      ops::matmul_nt(cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), cpu(ref_c, {rows, out_f}), true);
      compare("matmul_nt_accumulate", t, download(*dc, "matmul_nt"), ref_c, 1, t);
    }
}

// The MLP's fused linear + GeLU (cuBLASLt GELU_AUX_BIAS / GELU_AUX forward, DGELU backward) against
// the CPU's linear and GeLU; and that cuBLASLt does offer the epilogues on the GPT-2 MLP shapes (else
// the fused ops fall back to the separate kernels silently, and this would not test the epilogues).
void test_linear_gelu() {
  for (DType t : kDtypes)
    for (auto [rows, in_f, out_f] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {64, 96, 80}, {256, 128, 384}, {512, 768, 3072}, {512, 3072, 768}, {8, 72, 40}, {33, 64, 24}})
      for (bool with_bias : {true, false}) {
        auto x = randn(rows * in_f, 1.0f, t), w = randn(out_f * in_f, 0.1f, t), b = randn(out_f, 0.5f, t),
             dy = randn(rows * out_f, 1.0f, t), pre_in = randn(rows * in_f, 1.5f, t);
        std::unique_ptr<DeviceTensor> dx(upload(x, t, {rows, in_f})), dw(upload(w, t, {out_f, in_f})),
            db(upload(b, t, {out_f})), dpre(upload(dy, t, {rows, out_f})), dact(upload(dy, t, {rows, out_f}));
        const Tensor bias = with_bias ? db->tensor : Tensor();
        ops::linear_gelu_forward(dx->tensor, dw->tensor, bias, dpre->tensor, dact->tensor);
        std::vector<float> ref_pre(rows * out_f), ref_act(rows * out_f);
        ops::linear_gelu_forward(cpu(x, {rows, in_f}), cpu(w, {out_f, in_f}), with_bias ? cpu(b, {out_f}) : Tensor(),
                                 cpu(ref_pre, {rows, out_f}), cpu(ref_act, {rows, out_f}));
        compare("linear_gelu_forward_pre", t, download(*dpre, "linear_gelu_forward pre"), ref_pre, 1, t);
        compare("linear_gelu_forward_out", t, download(*dact, "linear_gelu_forward out"), ref_act, 1, t);
        // backward: in = gelu(pre_in) is this linear's input; d(pre_in) and the weight / bias gradients
        std::vector<float> act_in(rows * in_f);
        ops::gelu_forward(cpu(pre_in, {rows, in_f}), cpu(act_in, {rows, in_f}));
        for (float& v : act_in) v = round_to(v, t);
        auto gw = randn(out_f * in_f, 1.0f, DType::f32), gb = randn(out_f, 1.0f, DType::f32);
        std::unique_ptr<DeviceTensor> dact_in(upload(act_in, t, {rows, in_f})),
            dpre_in(upload(pre_in, t, {rows, in_f})), ddy(upload(dy, t, {rows, out_f})), ddpre(upload(x, t, {rows, in_f})),
            dgw(upload(gw, DType::f32, {out_f, in_f})), dgb(upload(gb, DType::f32, {out_f}));
        ops::linear_backward_dgelu(ddy->tensor, dact_in->tensor, dw->tensor, dpre_in->tensor, ddpre->tensor,
                                   dgw->tensor, with_bias ? dgb->tensor : Tensor());
        std::vector<float> ref_dpre(rows * in_f), ref_gw(gw), ref_gb(gb);
        ops::linear_backward_dgelu(cpu(dy, {rows, out_f}), cpu(act_in, {rows, in_f}), cpu(w, {out_f, in_f}),
                                   cpu(pre_in, {rows, in_f}), cpu(ref_dpre, {rows, in_f}), cpu(ref_gw, {out_f, in_f}),
                                   with_bias ? cpu(ref_gb, {out_f}) : Tensor());
        compare("linear_backward_dgelu_dpre", t, download(*ddpre, "linear_backward_dgelu dpre"), ref_dpre, 1, t);
        compare("linear_backward_dgelu_dweight_f32", t, download(*dgw, "linear_backward_dgelu dweight"), ref_gw, 1,
                DType::f32);
        if (with_bias)
          compare("linear_backward_dgelu_dbias_f32", t, download(*dgb, "linear_backward_dgelu dbias"), ref_gb, 1,
                  DType::f32);
      }
  // cuBLASLt offers both epilogues for the GPT-2 124M MLP in bf16 (4096 tokens: fc1 768 -> 3072; the
  // data gradient of fc2, 768 -> 3072, with gelu')
  const int64_t rows = 4096, hidden = 768, ffn = 3072;
  DeviceTensor in(DType::bf16, {rows, hidden}, nullptr), w1(DType::bf16, {ffn, hidden}, nullptr),
      b1(DType::bf16, {ffn}, nullptr), pre(DType::bf16, {rows, ffn}, nullptr), out(DType::bf16, {rows, ffn}, nullptr),
      dy(DType::bf16, {rows, hidden}, nullptr), w2(DType::bf16, {hidden, ffn}, nullptr),
      dpre(DType::bf16, {rows, ffn}, nullptr);
  ops::cuda::GemmDesc forward;
  forward.trans_b = true;
  forward.m = rows, forward.n = ffn, forward.k = hidden, forward.lda = hidden, forward.ldb = hidden, forward.ldc = ffn;
  forward.ab_dtype = forward.c_dtype = DType::bf16;
  ops::cuda::GemmDesc data_grad;
  data_grad.m = rows, data_grad.n = ffn, data_grad.k = hidden, data_grad.lda = hidden, data_grad.ldb = ffn;
  data_grad.ldc = ffn;
  data_grad.ab_dtype = data_grad.c_dtype = DType::bf16;
  const bool deterministic = ops::deterministic_mode();
  const bool aux_bias = ops::cuda::gemm_gelu_aux(forward, in.tensor.data(), w1.tensor.data(), out.tensor.data(),
                                                 b1.tensor.data(), pre.tensor.data());
  const bool dgelu = ops::cuda::gemm_dgelu(data_grad, dy.tensor.data(), w2.tensor.data(), dpre.tensor.data(),
                                           pre.tensor.data());
  cuda_ok(cudaDeviceSynchronize(), "gelu epilogues");
  std::printf("cuBLASLt epilogues on the 124M MLP (bf16): GELU_AUX_BIAS %s, DGELU %s%s\n", aux_bias ? "yes" : "no",
              dgelu ? "yes" : "no", deterministic ? " (deterministic mode: the forward keeps the GeLU kernel)" : "");
  if (!aux_bias || !dgelu) {
    std::printf("FAIL: cuBLASLt offers no GeLU epilogue for the GPT-2 124M MLP shape\n");
    ++failures;
  }
}

void test_attention() {
  struct Case { int64_t s, b, na, ng, hn; bool causal, padded; double dropout; };
  const std::vector<Case> cases = {{5, 2, 2, 1, 4, true, false, 0.0},    {16, 2, 4, 2, 8, true, true, 0.0},
                                   {33, 3, 4, 4, 16, false, true, 0.1},  {64, 2, 6, 2, 32, true, false, 0.1},
                                   {128, 2, 12, 12, 64, true, false, 0.0}, {256, 1, 4, 1, 64, true, true, 0.2}};
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      ops::AttentionParams p;
      p.num_heads = c.na, p.num_query_groups = c.ng, p.head_dim = c.hn, p.causal = c.causal, p.dropout = c.dropout;
      const int64_t width = (c.na + 2 * c.ng) * c.hn;
      const Shape qkv_shape{c.s, c.b, width}, out_shape{c.s, c.b, c.na * c.hn}, probs_shape{c.b, c.na, c.s, c.s};
      auto qkv = randn(shape_numel(qkv_shape), 1.0f, t), dy = randn(shape_numel(out_shape), 1.0f, t);
      std::vector<uint8_t> mask(c.b * c.s, 1);
      if (c.padded)
        for (int64_t bi = 0; bi < c.b; ++bi)
          for (int64_t j = 0; j < c.s; ++j) mask[bi * c.s + j] = (j % 5 != 3) && !(bi == 0 && j == 0);  // row 0 of b0 has no key
      const RandomStream stream(9, stream_id("attention.dropout"));
      std::unique_ptr<DeviceTensor> dqkv(upload(qkv, t, qkv_shape)), ddy(upload(dy, t, out_shape)),
          dout(upload(dy, t, out_shape)), dprobs(upload(std::vector<float>(shape_numel(probs_shape)), t, probs_shape)),
          dgrad(upload(qkv, t, qkv_shape));
      DeviceTensor dmask(DType::u8, {c.b, c.s}, mask.data());
      Tensor gpu_mask = c.padded ? dmask.tensor : Tensor();
      ops::attention_forward(dqkv->tensor, gpu_mask, p, stream, dout->tensor, dprobs->tensor);
      ops::attention_backward(ddy->tensor, dqkv->tensor, dprobs->tensor, p, stream, dgrad->tensor);
      std::vector<float> ref_out(shape_numel(out_shape)), ref_probs(shape_numel(probs_shape)), ref_grad(qkv.size());
      Tensor cpu_mask = c.padded ? Tensor(mask.data(), DType::u8, {c.b, c.s}) : Tensor();
      ops::attention_forward(cpu(qkv, qkv_shape), cpu_mask, p, stream, cpu(ref_out, out_shape), cpu(ref_probs, probs_shape));
      ops::attention_backward(cpu(dy, out_shape), cpu(qkv, qkv_shape), cpu(ref_probs, probs_shape), p, stream,
                              cpu(ref_grad, qkv_shape));
      compare("attention_forward_out", t, download(*dout, "attention_forward"), ref_out, 1, t);
      compare("attention_forward_probs", t, download(*dprobs, "attention_forward probs"), ref_probs, 1, t);
      compare("attention_backward_dqkv", t, download(*dgrad, "attention_backward"), ref_grad, 3, t);
    }
}

void test_cross_entropy() {
  for (DType t : kDtypes)
    for (auto [n, vocab, pad] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 10, 0}, {5, 64, 60}, {64, 1000, 3}, {7, 50257, 0}, {4, 50304, 47}, {3, 65536, 5}, {2, 102408, 8}}) {
      const int64_t valid = vocab - pad;
      auto logits = randn(n * vocab, 3.0f, t), dl = randn(n, 1.0f, DType::f32);
      std::vector<int32_t> targets(n);
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(valid - 1));
      for (auto& x : targets) x = pick(rng);
      DeviceTensor dtargets(DType::i32, {n}, targets.data());
      std::unique_ptr<DeviceTensor> dlogits(upload(logits, t, {n, vocab})), dloss(upload(std::vector<float>(n), DType::f32, {n})),
          dlse(upload(std::vector<float>(n), DType::f32, {n})), ddl(upload(dl, DType::f32, {n})),
          dgrad(upload(logits, t, {n, vocab}));
      ops::cross_entropy_forward(dlogits->tensor, dtargets.tensor, valid, dloss->tensor, dlse->tensor);
      ops::cross_entropy_backward(dlogits->tensor, dtargets.tensor, dlse->tensor, ddl->tensor, valid, dgrad->tensor);
      std::vector<float> ref_loss(n), ref_lse(n), ref_grad(n * vocab);
      Tensor ctargets(targets.data(), DType::i32, {n});
      ops::cross_entropy_forward(cpu(logits, {n, vocab}), ctargets, valid, cpu(ref_loss, {n}), cpu(ref_lse, {n}));
      ops::cross_entropy_backward(cpu(logits, {n, vocab}), ctargets, cpu(ref_lse, {n}), cpu(dl, {n}), valid,
                                  cpu(ref_grad, {n, vocab}));
      compare("cross_entropy_forward_loss", t, download(*dloss, "cross_entropy_forward"), ref_loss, 0.1, DType::f32);
      compare("cross_entropy_backward", t, download(*dgrad, "cross_entropy_backward"), ref_grad, 2, t);
      // Forward and backward in one pass (one kernel for bf16 / f16 rows up to 65,536 columns),
      // into a separate gradient, then in place as GPTModel::chunk_loss calls it.
      std::unique_ptr<DeviceTensor> floss(upload(std::vector<float>(n, -1.0f), DType::f32, {n})),
          flse(upload(std::vector<float>(n, -1.0f), DType::f32, {n})), fgrad(upload(std::vector<float>(n * vocab), t, {n, vocab}));
      ops::cross_entropy_forward_backward(dlogits->tensor, dtargets.tensor, ddl->tensor, valid, floss->tensor,
                                          flse->tensor, fgrad->tensor);
      compare("cross_entropy_forward_backward_loss", t, download(*floss, "cross_entropy_forward_backward"), ref_loss, 0.1, DType::f32);
      compare("cross_entropy_forward_backward_lse", t, download(*flse, "cross_entropy_forward_backward"), ref_lse, 0.1, DType::f32);
      compare("cross_entropy_forward_backward_grad", t, download(*fgrad, "cross_entropy_forward_backward"), ref_grad, 2, t);
      ops::cross_entropy_forward_backward(dlogits->tensor, dtargets.tensor, ddl->tensor, valid, floss->tensor,
                                          flse->tensor, dlogits->tensor);
      compare("cross_entropy_forward_backward_inplace", t, download(*dlogits, "cross_entropy_forward_backward in place"),
              ref_grad, 2, t);
      compare("cross_entropy_forward_backward_inplace_loss", t, download(*floss, "cross_entropy_forward_backward"), ref_loss, 0.1, DType::f32);
      // In place, as models/ call it: the gradient overwrites the logits.
      std::unique_ptr<DeviceTensor> again(upload(logits, t, {n, vocab}));
      ops::cross_entropy_backward(again->tensor, dtargets.tensor, dlse->tensor, ddl->tensor, valid, again->tensor);
      compare("cross_entropy_backward_inplace", t, download(*again, "cross_entropy_backward in place"), ref_grad, 2, t);
    }
}

void test_adamw() {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(100003)}) {
    auto param = randn(n, 1.0f, DType::f32), m = randn(n, 0.01f, DType::f32), v = randn(n, 1e-4f, DType::f32);
    for (auto& x : v) x = std::fabs(x);
    std::unique_ptr<DeviceTensor> dp(upload(param, DType::f32, {n})), dm(upload(m, DType::f32, {n})),
        dv(upload(v, DType::f32, {n})), dg(upload(param, DType::f32, {n}));
    for (int step = 1; step <= 3; ++step) {
      auto g = randn(n, 0.1f, DType::f32);
      std::unique_ptr<DeviceTensor> dgs(upload(g, DType::f32, {n}));
      ops::AdamWParams hp;
      hp.lr = 6e-4, hp.beta1 = 0.9, hp.beta2 = 0.95, hp.eps = 1e-8, hp.weight_decay = 0.1, hp.step = step;
      ops::adamw_update(dp->tensor, dgs->tensor, dm->tensor, dv->tensor, hp);
      ops::adamw_update(cpu(param, {n}), cpu(g, {n}), cpu(m, {n}), cpu(v, {n}), hp);
    }
    compare("adamw_param", DType::f32, download(*dp, "adamw"), param, 0.1, DType::f32);
    compare("adamw_exp_avg_sq", DType::f32, download(*dv, "adamw"), v, 1, DType::f32);
  }
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  gpu_test::honour_deterministic_switch();
  const bool ran = gpu_test::ran_without_exception([] {
    test_gelu();
    test_dropout();
    test_elementwise();
    test_embedding();
    test_layernorm();
    test_linear();
    test_linear_gelu();
    test_attention();
    test_cross_entropy();
    test_adamw();
  });
  return ran ? results.summarise("ops parity", failures) : 1;
}
