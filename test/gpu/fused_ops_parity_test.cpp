// CUDA parity suite of the fused ops (label gpu): RMSNorm, rotary position embedding (head form and
// the row form on a fused QKV) and bias + dropout + residual add, each on CUDA (f32, bf16, f16) against
// the CPU f32 reference on the same rounded inputs over a grid of shapes, with stated normalised error
// thresholds, NaN/Inf agreement, guard bytes around every device output and exact dropout-mask
// agreement. Exits 77 (skipped) without a visible GPU.
//
// Thresholds: normalised error max|gpu - ref| / max|ref| over finite entries must be below
// base(dtype) * factor, base = 1e-4 (f32), 2e-2 (bf16), 4e-3 (f16) (the larger of the input and the
// output dtype); factor 1 for forward outputs, 2 for reductions over rows (RMSNorm din / dweight in
// f32, bias_dropout_add dbias), 3 for dweight stored in bf16/f16; RMSNorm din is normalised by at
// least max |rstd * dout * weight| (its terms cancel when hidden = 1). RoPE adds 8 * max_position * 2^-23
// (the fp32 angle position * inv_freq is off by a few ulp of the angle; the CPU uses double).
// bias_dropout_add forward and dx must equal the rounded CPU f32 result bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/bias_dropout_add.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/rmsnorm.h"
#include "tessera/ops/rope.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::cuda_ok;
using gpu_test::round_to;
using gpu_test::upload;
std::mt19937 rng(4321);
int failures = 0;

std::vector<float> randn(int64_t n, float stddev, DType t, float mean = 0.0f) {
  return gpu_test::random_normal(rng, n, stddev, t, mean);
}

std::vector<float> download(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}

gpu_test::ParityTable results;  // "op dtype" -> worst normalised error

double base_tolerance(DType t) { return t == DType::f32 ? 1e-4 : t == DType::bf16 ? 2e-2 : 4e-3; }

// Normalised error max|gpu - ref| / max|ref| over finite entries; NaN/Inf classes must agree after
// rounding the reference to the output dtype (an f16 overflow to Inf is expected on both sides).
// scale_floor: a lower bound of the normaliser (the size of terms that cancel in the result).
void compare(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref,
             double factor, DType output_dtype, double extra_tolerance = 0.0, double scale_floor = 0.0) {
  const double tol = std::max(base_tolerance(t), base_tolerance(output_dtype)) * factor + extra_tolerance;
  const gpu_test::NormalisedError measured = gpu_test::normalised_error(gpu, ref, output_dtype, scale_floor);
  const double err = measured.error;
  const int special_mismatch = measured.special_mismatches;
  const std::string key = op + " " + std::string(dtype_name(t));
  if (!results.record(key, err, tol, err <= tol && !special_mismatch && std::isfinite(err))) {
    ++failures;
    std::printf("FAIL %s: normalised error %.3g (tolerance %.3g), %d NaN/Inf mismatches, %zu elements\n", key.c_str(),
                err, tol, special_mismatch, ref.size());
  }
}

// gpu must equal ref rounded to the output dtype bit for bit (NaN matches NaN).
void compare_exact(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref) {
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = round_to(ref[i], t);
    const bool same = (std::isnan(r) && std::isnan(gpu[i])) || std::memcmp(&r, &gpu[i], 4) == 0;
    if (!same && mismatches++ == 0) first = static_cast<int64_t>(i);
  }
  const std::string key = op + "_exact " + std::string(dtype_name(t));
  if (!results.record(key, 0, 0, !mismatches)) {
    ++failures;
    std::printf("FAIL %s: %lld of %zu elements differ from the rounded CPU result (first at %lld: %.9g vs %.9g)\n",
                key.c_str(), (long long)mismatches, ref.size(), (long long)first, gpu[first], round_to(ref[first], t));
  }
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// ---------------------------------------------------------------------------------------------
// din = rstd * (dy w - xhat mean(dy w xhat)) cancels to ~0 where xhat^2 ~ 1 (hidden = 1), so its error
// is normalised by at least the largest finite term rstd * |dy w|.
double din_term_scale(const std::vector<float>& dy, const std::vector<float>& w, const std::vector<float>& rstd,
                      int64_t hidden) {
  double scale = 0.0;
  for (size_t i = 0; i < dy.size(); ++i) {
    const double term = std::fabs(double(rstd[i / hidden]) * dy[i] * w[i % hidden]);
    if (std::isfinite(term)) scale = std::max(scale, term);
  }
  return scale;
}

void test_rmsnorm() {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {3, 7},     {37, 96},  {128, 768}, {5, 1023},
                                                           {20, 1600}, {64, 4096}, {9, 4099}, {3, 12289}};
  for (DType t : kDtypes)
    for (auto [rows, hidden] : shapes) {
      auto x = randn(rows * hidden, 1.5f, t, 0.3f), w = randn(hidden, 0.5f, t, 1.0f), dy = randn(rows * hidden, 1.0f, t);
      // Row 1 becomes NaN on both sides (and with it every dweight column), so only odd row counts get one.
      if (rows > 2 && rows % 2 == 1) x[hidden + hidden / 2] = NAN;
      const Shape s{rows, hidden};
      auto dx = upload(x, t, s), dw = upload(w, t, {hidden}), ddy = upload(dy, t, s), dout = upload(x, t, s),
           drstd = upload(std::vector<float>(rows), DType::f32, {rows}), ddin = upload(x, t, s);
      ops::rmsnorm_forward(dx->tensor, dw->tensor, 1e-5, dout->tensor, drstd->tensor);
      std::vector<float> ref_out(rows * hidden), rstd(rows);
      ops::rmsnorm_forward(cpu(x, s), cpu(w, {hidden}), 1e-5, cpu(ref_out, s), cpu(rstd, {rows}));
      compare("rmsnorm_forward", t, download(*dout, "rmsnorm_forward"), ref_out, 1, t);
      compare("rmsnorm_rstd_f32", t, download(*drstd, "rmsnorm_forward rstd"), rstd, 1, DType::f32);
      for (DType g : {DType::f32, t}) {  // fp32 main grad, or the activation dtype
        auto gw = randn(hidden, 0.1f, g);
        auto dgw = upload(gw, g, {hidden});
        ops::rmsnorm_backward(ddy->tensor, dx->tensor, dw->tensor, drstd->tensor, ddin->tensor, dgw->tensor);
        std::vector<float> ref_din(rows * hidden), ref_gw(gw);
        ops::rmsnorm_backward(cpu(dy, s), cpu(x, s), cpu(w, {hidden}), cpu(rstd, {rows}), cpu(ref_din, s),
                              cpu(ref_gw, {hidden}));
        compare("rmsnorm_backward_din", t, download(*ddin, "rmsnorm_backward din"), ref_din, 2, t, 0.0,
                din_term_scale(dy, w, rstd, hidden));
        compare("rmsnorm_backward_dweight_" + std::string(dtype_name(g)), t,
                download(*dgw, "rmsnorm_backward dweight"), ref_gw, g == DType::f32 ? 2 : 3, g);
      }
      // rstd stored in the activation dtype.
      auto drstd_t = upload(std::vector<float>(rows), t, {rows}), dout2 = upload(x, t, s);
      ops::rmsnorm_forward(dx->tensor, dw->tensor, 1e-5, dout2->tensor, drstd_t->tensor);
      compare("rmsnorm_rstd_like_input", t, download(*drstd_t, "rmsnorm_forward rstd (input dtype)"), rstd, 1, t);
    }
}

// ---------------------------------------------------------------------------------------------
double rope_extra_tolerance(int64_t max_position) { return 8.0 * double(max_position) * std::ldexp(1.0, -23); }

void test_rope() {
  struct Case { int64_t s, b, heads, hn; int positions; };  // positions: 0 none, 1 [s], 2 [b, s]
  const std::vector<Case> cases = {{1, 1, 1, 2, 0},   {5, 3, 2, 6, 1},     {33, 2, 4, 64, 2}, {128, 2, 12, 64, 0},
                                   {7, 3, 3, 130, 2}, {16, 2, 32, 128, 1}, {512, 1, 8, 128, 0}};
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      const Shape shape{c.s, c.b, c.heads, c.hn};
      const int64_t n = shape_numel(shape);
      auto x = randn(n, 1.0f, t), dy = randn(n, 1.0f, t);
      x[0] = NAN;
      if (n > 5) x[5] = INFINITY;
      std::vector<int32_t> pos;
      int64_t max_position = c.s - 1;
      Shape pos_shape;
      if (c.positions == 1) pos_shape = {c.s};
      if (c.positions == 2) pos_shape = {c.b, c.s};
      if (c.positions) {
        pos.resize(shape_numel(pos_shape));
        std::uniform_int_distribution<int32_t> pick(0, 8191);
        for (auto& p : pos) p = pick(rng);
        max_position = *std::max_element(pos.begin(), pos.end());
      }
      std::unique_ptr<DeviceTensor> dpos;
      Tensor gpu_pos, cpu_pos;
      if (c.positions) {
        dpos = std::make_unique<DeviceTensor>(DType::i32, pos_shape, pos.data());
        gpu_pos = dpos->tensor;
        cpu_pos = Tensor(pos.data(), DType::i32, pos_shape);
      }
      const double extra = rope_extra_tolerance(max_position);
      auto dxt = upload(x, t, shape), dgt = upload(dy, t, shape);
      ops::rope_forward(dxt->tensor, gpu_pos, 10000.0);
      ops::rope_backward(dgt->tensor, gpu_pos, 10000.0);
      std::vector<float> ref_x(x), ref_g(dy);
      ops::rope_forward(cpu(ref_x, shape), cpu_pos, 10000.0);
      ops::rope_backward(cpu(ref_g, shape), cpu_pos, 10000.0);
      compare("rope_forward", t, download(*dxt, "rope_forward"), ref_x, 1, t, extra);
      compare("rope_backward", t, download(*dgt, "rope_backward"), ref_g, 1, t, extra);
      // backward(forward(dy)) on the device returns dy (up to the dtype's rounding, twice).
      ops::rope_forward(dgt->tensor, gpu_pos, 10000.0);
      compare("rope_backward_of_forward", t, download(*dgt, "rope round trip"), dy, 2, t, 2 * extra);
    }
  // The row form on Megatron's fused QKV [s, b, (na + 2 ng) hn]: queries and keys rotate, values do not.
  struct QkvCase { int64_t s, b, na, ng, hn; };
  for (DType t : kDtypes)
    for (const QkvCase& c : std::vector<QkvCase>{{3, 2, 2, 1, 4}, {64, 2, 8, 2, 64}, {33, 3, 12, 12, 32}}) {
      const int64_t hpg = c.na / c.ng, width = (c.na + 2 * c.ng) * c.hn, stride = (hpg + 2) * c.hn;
      const Shape shape{c.s, c.b, width};
      auto qkv = randn(shape_numel(shape), 1.0f, t);
      std::vector<int32_t> pos(c.b * c.s);
      for (int64_t i = 0; i < c.b * c.s; ++i) pos[i] = static_cast<int32_t>((i * 37) % 2048);
      DeviceTensor dpos(DType::i32, {c.b, c.s}, pos.data());
      Tensor cpu_pos(pos.data(), DType::i32, {c.b, c.s});
      const ops::RopeHeads queries{0, hpg, c.hn, c.ng, stride}, keys{hpg * c.hn, 1, c.hn, c.ng, stride};
      auto dqkv = upload(qkv, t, shape);
      ops::rope_forward_rows(dqkv->tensor, queries, dpos.tensor);
      ops::rope_forward_rows(dqkv->tensor, keys, dpos.tensor);
      std::vector<float> ref(qkv);
      ops::rope_forward_rows(cpu(ref, shape), queries, cpu_pos);
      ops::rope_forward_rows(cpu(ref, shape), keys, cpu_pos);
      const auto got = download(*dqkv, "rope_forward_rows");
      compare("rope_forward_rows_qkv", t, got, ref, 1, t, rope_extra_tolerance(2047));
      int64_t value_changes = 0;  // value heads must be untouched, bit for bit
      for (int64_t r = 0; r < c.s * c.b; ++r)
        for (int64_t g = 0; g < c.ng; ++g)
          for (int64_t d = 0; d < c.hn; ++d) {
            const int64_t i = r * width + g * stride + (hpg + 1) * c.hn + d;
            value_changes += std::memcmp(&got[i], &qkv[i], 4) != 0;
          }
      if (!results.record("rope_rows_values_untouched " + std::string(dtype_name(t)), 0, 0, !value_changes)) {
        std::printf("FAIL rope_forward_rows %s: %lld value elements changed\n", std::string(dtype_name(t)).c_str(),
                    (long long)value_changes);
        ++failures;
      }
    }
}

// ---------------------------------------------------------------------------------------------
void test_bias_dropout_add() {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 33}, {128, 768}, {3, 4099}, {512, 1024},
                                                           {2000, 770}, {4100, 96}};
  for (DType t : kDtypes)
    for (double p : {0.0, 0.1, 0.5})
      for (auto [rows, cols] : shapes)
        for (bool with_bias : {true, false}) {
          const Shape s{rows, cols};
          const int64_t n = rows * cols;
          auto x = randn(n, 1.0f, t, 3.0f), bias = randn(cols, 0.3f, t), residual = randn(n, 1.0f, t),
               dy = randn(n, 1.0f, t, 3.0f);  // dy far from 0: zeros of dx mark dropped elements
          if (n > 10) x[10] = NAN, residual[3] = INFINITY;
          const RandomStream stream(42, mix_stream(stream_id("layers.3.hidden_dropout"), rows * 131 + cols));
          const uint64_t offset = 7 * uint64_t(n) + 5;
          auto dx = upload(x, t, s), db = upload(bias, t, {cols}), dres = upload(residual, t, s),
               dout = upload(std::vector<float>(n), t, s), dzero = upload(std::vector<float>(n), t, s),
               dmask = upload(std::vector<float>(n), t, s), ddy = upload(dy, t, s), dgx = upload(dy, t, s);
          const Tensor gpu_bias = with_bias ? db->tensor : Tensor();
          ops::bias_dropout_add_forward(dx->tensor, gpu_bias, dres->tensor, p, stream, offset, dout->tensor);
          std::vector<float> ref(n), ones(n, 1.0f), ref_mask(n), xb(x);
          Tensor cpu_bias = with_bias ? cpu(bias, {cols}) : Tensor();
          ops::bias_dropout_add_forward(cpu(x, s), cpu_bias, cpu(residual, s), p, stream, offset, cpu(ref, s));
          const auto got = download(*dout, "bias_dropout_add_forward");
          compare("bias_dropout_add_forward", t, got, ref, 1, t);
          compare_exact("bias_dropout_add_forward", t, got, ref);
          // Mask: with a zero residual, out == 0 exactly where dropout drops element i (or where x + bias
          // is exactly 0, which happens in bf16/f16: those are skipped); the reference mask is
          // dropout_forward of ones (zero iff dropped).
          ops::bias_dropout_add_forward(dx->tensor, gpu_bias, dzero->tensor, p, stream, offset, dmask->tensor);
          if (with_bias)
            for (int64_t i = 0; i < n; ++i) xb[i] = x[i] + bias[i % cols];
          ops::dropout_forward(cpu(ones, s), p, stream, offset, cpu(ref_mask, s));
          const auto got_mask = download(*dmask, "bias_dropout_add_forward (zero residual)");
          // Backward: dx = dropout(dy) with the same mask; dbias += column sums (f32 main grad or t).
          for (DType g : {DType::f32, t}) {
            auto gb = randn(cols, 0.1f, g);
            auto dgb = upload(gb, g, {cols});
            ops::bias_dropout_add_backward(ddy->tensor, p, stream, offset, dgx->tensor, dgb->tensor);
            std::vector<float> ref_gx(n), ref_gb(gb);
            ops::bias_dropout_add_backward(cpu(dy, s), p, stream, offset, cpu(ref_gx, s), cpu(ref_gb, {cols}));
            const auto got_gx = download(*dgx, "bias_dropout_add_backward dx");
            compare_exact("bias_dropout_add_backward_dx", t, got_gx, ref_gx);
            compare("bias_dropout_add_backward_dbias_" + std::string(dtype_name(g)), t,
                    download(*dgb, "bias_dropout_add_backward dbias"), ref_gb, 2, g);
            int64_t mask_mismatch = 0;
            for (int64_t i = 0; i < n; ++i) {
              const bool ref_dropped = ref_mask[i] == 0.0f;
              // dy is far from 0, but over the [2000, 770] shape one bf16 draw is exactly 0 (its dx is 0
              // kept or dropped): such elements say nothing about the mask, like a zero x + bias below.
              if (dy[i] != 0.0f) mask_mismatch += (got_gx[i] == 0.0f) != ref_dropped;
              if (std::isfinite(xb[i]) && xb[i] != 0.0f) mask_mismatch += (got_mask[i] == 0.0f) != ref_dropped;
            }
            const std::string key = "bias_dropout_add_mask " + std::string(dtype_name(t));
            if (!results.record(key, 0, 0, !mask_mismatch)) {
              std::printf("FAIL %s p=%g [%lld, %lld]: %lld mask mismatches vs CPU dropout_forward\n", key.c_str(), p,
                          (long long)rows, (long long)cols, (long long)mask_mismatch);
              ++failures;
            }
          }
        }
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  gpu_test::honour_deterministic_switch();
  const bool ran = gpu_test::ran_without_exception([] {
    test_rmsnorm();
    test_rope();
    test_bias_dropout_add();
  });
  return ran ? results.summarise("fused ops parity", failures) : 1;
}
