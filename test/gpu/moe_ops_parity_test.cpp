// MoE op parity (label gpu): the CUDA router (softmax, softmax pre-softmax, sigmoid; top-1/2/4 of
// 8 and 64 experts, rows with tied logits) and its backward, the per-expert counts, the permutation
// (dropless, dropped over capacity, padded to capacity) and the weighted combine with their
// backwards, and the experts' grouped linear layers (cublasGemmGroupedBatchedEx: forward, dgrad,
// wgrad into f32 main grads, bias grads; groups of 0 rows) (ops/moe_device.h), against the CPU references (ops/moe_router.h, ops/moe_permute.h)
// on the same rounded inputs, f32 and bf16. The chosen experts and counts must match exactly; the
// combine and its backward must be bitwise deterministic over two runs. Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/moe_capacity.h"
#include "tessera/ops/moe_device.h"
#include "tessera/ops/moe_permute.h"
#include "tessera/ops/moe_router.h"

using namespace tessera;

namespace {

using gpu_test::DeviceTensor;
using gpu_test::cpu;
using gpu_test::upload;
std::mt19937 rng(2468);
int failures = 0;

gpu_test::ParityTable results{"op dtype", "max_err"};

template <typename T>
std::unique_ptr<DeviceTensor> upload_raw(const std::vector<T>& v, DType t) {
  return std::make_unique<DeviceTensor>(t, Shape{static_cast<int64_t>(v.size())}, v.data());
}
std::vector<float> download(const DeviceTensor& d, const std::string& what) {
  return gpu_test::download_checked(d, what, failures);
}
template <typename T>
std::vector<T> download_raw(const DeviceTensor& d, const std::string& what) {
  ops::cuda::synchronize();
  gpu_test::cuda_ok(cudaGetLastError(), what.c_str());
  if (!d.guards_intact()) {
    std::printf("FAIL %s: guard bytes overwritten\n", what.c_str());
    ++failures;
  }
  std::vector<T> out(d.bytes / sizeof(T));
  if (d.bytes) gpu_test::cuda_ok(cudaMemcpy(out.data(), d.tensor.data(), d.bytes, cudaMemcpyDeviceToHost), "download");
  return out;
}
double base_tolerance(DType t) { return t == DType::f32 ? 1e-5 : 2e-2; }

void record(const std::string& key, double error, double tol, bool ok) {
  if (!results.record(key, error, tol, ok)) ++failures;
}

void compare(const std::string& op, DType t, const std::vector<float>& gpu, const std::vector<float>& ref,
             double factor) {
  const double tol = base_tolerance(t) * factor;
  const gpu_test::NormalisedError m = gpu_test::normalised_error(gpu, ref, t, 0.0);
  const std::string key = op + " " + std::string(dtype_name(t));
  const bool ok = m.error <= tol && !m.special_mismatches && std::isfinite(m.error);
  if (!ok)
    std::printf("FAIL %s: normalised error %.3g (tolerance %.3g), %d NaN/Inf mismatches\n", key.c_str(), m.error, tol,
                m.special_mismatches);
  record(key, m.error, tol, ok);
}

template <typename T>
void compare_exact(const std::string& key, const std::vector<T>& gpu, const std::vector<T>& ref) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < ref.size(); ++i) mismatches += gpu.at(i) != ref[i];
  if (gpu.size() != ref.size() || mismatches)
    std::printf("FAIL %s: %lld of %zu entries differ\n", key.c_str(), static_cast<long long>(mismatches), ref.size());
  record(key, static_cast<double>(mismatches), 0, gpu.size() == ref.size() && mismatches == 0);
}

void compare_bitwise(const std::string& key, const std::vector<float>& a, const std::vector<float>& b) {
  const bool same = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  if (!same) std::printf("FAIL %s: two runs differ\n", key.c_str());
  record(key, same ? 0 : 1, 0, same);
}

std::string options_name(const ops::RouterOptions& o) {
  return std::string(o.score == ops::RouterScore::sigmoid ? "sigmoid" : o.pre_softmax ? "pre_softmax" : "softmax") +
         " top" + std::to_string(o.topk);
}

// Random f32 logits [t, e]; every fourth row on a coarse grid (ties between experts).
std::vector<float> make_logits(int64_t t, int64_t e) {
  auto v = gpu_test::random_normal(rng, t * e, 1.5f, DType::f32);
  for (int64_t row = 0; row < t; row += 4)
    for (int64_t i = 0; i < e; ++i) v[row * e + i] = std::round(v[row * e + i] * 2.0f) / 2.0f;
  return v;
}

void test_router() {
  const int64_t t = 1031;
  for (int64_t e : {int64_t{8}, int64_t{64}})
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{4}})
      for (int variant = 0; variant < 3; ++variant) {
        ops::RouterOptions o;
        o.topk = k;
        o.score = variant == 2 ? ops::RouterScore::sigmoid : ops::RouterScore::softmax;
        o.pre_softmax = variant == 1;
        const std::string name = options_name(o);
        auto logits = make_logits(t, e);
        const ops::Routing ref = ops::moe_router_forward(cpu(logits, {t, e}), o);
        auto d_logits = upload(logits, DType::f32, {t, e});
        DeviceTensor d_experts(DType::i32, {t * k}, nullptr), d_probs(DType::f32, {t * k}, nullptr);
        ops::moe_router_forward_device(d_logits->tensor, o, d_experts.tensor, d_probs.tensor);
        compare_exact("router_forward experts " + name, download_raw<int32_t>(d_experts, "router experts"), ref.experts);
        compare("router_forward probs " + name, DType::f32, download(d_probs, "router probs"), ref.probs, 0.1);
        // counts
        DeviceTensor d_counts(DType::i64, {e}, nullptr);
        ops::moe_expert_counts_device(d_experts.tensor, d_counts.tensor);
        compare_exact("expert_counts", download_raw<int64_t>(d_counts, "counts"), ref.routed_per_expert());
        // backward
        auto dprobs = gpu_test::random_normal(rng, t * k, 1.0f, DType::f32);
        std::vector<float> dlogits(static_cast<size_t>(t * e));
        ops::moe_router_backward(cpu(logits, {t, e}), ref, o, dprobs, cpu(dlogits, {t, e}));
        auto d_dprobs = upload(dprobs, DType::f32, {t * k});
        DeviceTensor d_dlogits(DType::f32, {t, e}, nullptr);
        ops::moe_router_backward_device(d_logits->tensor, d_experts.tensor, o, d_dprobs->tensor, d_dlogits.tensor);
        compare("router_backward " + name, DType::f32, download(d_dlogits, "router backward"), dlogits, 0.1);
      }
}

// One permutation case: t tokens, e experts, top-k, capacity factor (0: dropless), padding.
void test_permutation_case(DType dt, int64_t t, int64_t e, int64_t k, int64_t h, double capacity_factor, bool pad) {
  const std::string tag = capacity_factor == 0 ? "dropless" : pad ? "padded" : "dropping";
  ops::RouterOptions o;
  o.topk = k;
  auto logits = make_logits(t, e);
  ops::Routing routing = ops::moe_router_forward(cpu(logits, {t, e}), o);
  int64_t pad_to = 0, dropped = 0;
  if (capacity_factor > 0) {
    const int64_t capacity = ops::moe_expert_capacity(t, k, e, capacity_factor);
    dropped = ops::moe_drop_over_capacity(routing, capacity);
    if (pad) pad_to = capacity;
  }
  if (capacity_factor > 0 && dropped == 0) {
    std::printf("FAIL permutation %s: no slot dropped (the case tests nothing)\n", tag.c_str());
    ++failures;
  }
  const ops::Permutation p = ops::moe_make_permutation(routing, pad_to);
  const int64_t rows = p.rows();
  const std::vector<int64_t> slot_row = ops::moe_slot_rows(p);
  auto d_row_slot = upload_raw(p.row_slot, DType::i64);
  auto d_slot_row = upload_raw(slot_row, DType::i64);
  auto d_probs = upload(routing.probs, DType::f32, {t * k});

  auto x = gpu_test::random_normal(rng, t * h, 1.0f, dt);
  auto expert_out = gpu_test::random_normal(rng, rows * h, 1.0f, dt);
  auto dy = gpu_test::random_normal(rng, t * h, 1.0f, dt);
  auto drows = gpu_test::random_normal(rng, rows * h, 1.0f, dt);
  auto d_x = upload(x, dt, {t, h});
  auto d_expert_out = upload(expert_out, dt, {rows, h});
  auto d_dy = upload(dy, dt, {t, h});
  auto d_drows = upload(drows, dt, {rows, h});

  // permute forward / backward
  std::vector<float> permuted(static_cast<size_t>(rows * h)), dx(static_cast<size_t>(t * h));
  ops::moe_permute_forward(cpu(x, {t, h}), p, cpu(permuted, {rows, h}));
  ops::moe_permute_backward(cpu(drows, {rows, h}), p, cpu(dx, {t, h}));
  DeviceTensor d_permuted(dt, {rows, h}, nullptr), d_dx(dt, {t, h}, nullptr);
  ops::moe_permute_forward_device(d_x->tensor, d_row_slot->tensor.view({rows}), k, d_permuted.tensor);
  ops::moe_permute_backward_device(d_drows->tensor, d_slot_row->tensor, d_dx.tensor);
  compare("permute_forward " + tag, dt, download(d_permuted, "permute_forward"), permuted, 0.01);
  compare("permute_backward " + tag, dt, download(d_dx, "permute_backward"), dx, 1);

  // unpermute (weighted combine) forward / backward
  std::vector<float> y(static_cast<size_t>(t * h)), dexpert(static_cast<size_t>(rows * h)),
      dprobs(static_cast<size_t>(t * k));
  ops::moe_unpermute_forward(cpu(expert_out, {rows, h}), p, routing.probs, cpu(y, {t, h}));
  ops::moe_unpermute_backward(cpu(dy, {t, h}), cpu(expert_out, {rows, h}), p, routing.probs, cpu(dexpert, {rows, h}),
                              dprobs);
  DeviceTensor d_y(dt, {t, h}, nullptr), d_dexpert(dt, {rows, h}, nullptr), d_dprobs(DType::f32, {t * k}, nullptr);
  std::vector<float> first_y, first_dexpert, first_dprobs;
  for (int run = 0; run < 2; ++run) {
    ops::moe_unpermute_forward_device(d_expert_out->tensor, d_slot_row->tensor, d_probs->tensor, d_y.tensor);
    ops::moe_unpermute_backward_device(d_dy->tensor, d_expert_out->tensor, d_row_slot->tensor, d_probs->tensor,
                                       d_dexpert.tensor, d_dprobs.tensor);
    auto gy = download(d_y, "unpermute_forward"), gde = download(d_dexpert, "unpermute_backward dexpert_out"),
         gdp = download(d_dprobs, "unpermute_backward dprobs");
    if (run == 0) {
      compare("unpermute_forward " + tag, dt, gy, y, 1);
      compare("unpermute_backward dexpert_out " + tag, dt, gde, dexpert, 1);
      // dprobs: a dot product over h of values rounded to dt (f32 output; the tolerance follows dt).
      compare("unpermute_backward dprobs " + tag, dt, gdp, dprobs, 1);
      first_y = gy, first_dexpert = gde, first_dprobs = gdp;
    } else {
      compare_bitwise("deterministic combine " + std::string(dtype_name(dt)), first_y, gy);
      compare_bitwise("deterministic combine backward " + std::string(dtype_name(dt)), first_dprobs, gdp);
      compare_bitwise("deterministic combine backward " + std::string(dtype_name(dt)), first_dexpert, gde);
    }
  }
}

void test_permutation() {
  for (DType dt : {DType::f32, DType::bf16}) {
    test_permutation_case(dt, 517, 8, 2, 192, 0.0, false);
    test_permutation_case(dt, 2048, 64, 4, 96, 0.0, false);
    test_permutation_case(dt, 517, 8, 2, 192, 0.75, false);
    test_permutation_case(dt, 517, 8, 2, 192, 0.75, true);
    test_permutation_case(dt, 300, 4, 1, 768, 1.0, true);
  }
}

// Grouped linear (ops/moe_device.h) against ops::linear_forward / linear_backward per group.
void test_grouped_linear() {
  const std::vector<int64_t> rows = {37, 0, 129, 64, 1};
  const int64_t in_f = 96, out_f = 160, groups = static_cast<int64_t>(rows.size());
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  for (DType dt : {DType::f32, DType::bf16}) {
    auto in = gpu_test::random_normal(rng, total * in_f, 1.0f, dt);
    auto dout = gpu_test::random_normal(rng, total * out_f, 1.0f, dt);
    std::vector<std::vector<float>> w, b, dw, db;
    std::vector<std::unique_ptr<DeviceTensor>> dw_dev, db_dev, w_dev, b_dev;
    std::vector<Tensor> w_t, b_t, dw_t, db_t;
    for (int64_t g = 0; g < groups; ++g) {
      w.push_back(gpu_test::random_normal(rng, out_f * in_f, 0.1f, dt));
      b.push_back(gpu_test::random_normal(rng, out_f, 0.1f, dt));
      dw.push_back(gpu_test::random_normal(rng, out_f * in_f, 1.0f, DType::f32));  // main grads: += onto these
      db.push_back(gpu_test::random_normal(rng, out_f, 1.0f, DType::f32));
      w_dev.push_back(upload(w.back(), dt, {out_f, in_f}));
      b_dev.push_back(upload(b.back(), dt, {out_f}));
      dw_dev.push_back(upload(dw.back(), DType::f32, {out_f, in_f}));
      db_dev.push_back(upload(db.back(), DType::f32, {out_f}));
      w_t.push_back(w_dev.back()->tensor), b_t.push_back(b_dev.back()->tensor);
      dw_t.push_back(dw_dev.back()->tensor), db_t.push_back(db_dev.back()->tensor);
    }
    std::vector<float> out(static_cast<size_t>(total * out_f)), din(static_cast<size_t>(total * in_f));
    int64_t row = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r = rows[static_cast<size_t>(g)];
      if (r > 0) {
        Tensor in_g = Tensor(in.data() + row * in_f, DType::f32, {r, in_f});
        Tensor dout_g = Tensor(dout.data() + row * out_f, DType::f32, {r, out_f});
        ops::linear_forward(in_g, cpu(w[g], {out_f, in_f}), cpu(b[g], {out_f}),
                            Tensor(out.data() + row * out_f, DType::f32, {r, out_f}));
        ops::linear_backward(dout_g, in_g, cpu(w[g], {out_f, in_f}),
                             Tensor(din.data() + row * in_f, DType::f32, {r, in_f}), cpu(dw[g], {out_f, in_f}),
                             cpu(db[g], {out_f}));
      }
      row += r;
    }
    auto d_in = upload(in, dt, {total, in_f});
    auto d_dout = upload(dout, dt, {total, out_f});
    DeviceTensor d_out(dt, {total, out_f}, nullptr), d_din(dt, {total, in_f}, nullptr);
    ops::moe_grouped_linear_forward(d_in->tensor, w_t, b_t, rows, d_out.tensor);
    ops::moe_grouped_linear_backward(d_dout->tensor, d_in->tensor, w_t, rows, d_din.tensor, dw_t, db_t);
    compare("grouped_linear_forward", dt, download(d_out, "grouped forward"), out, 1);
    compare("grouped_linear_backward din", dt, download(d_din, "grouped dgrad"), din, 1);
    for (int64_t g = 0; g < groups; ++g) {
      compare("grouped_linear_backward dweight (f32 main grad)", dt, download(*dw_dev[g], "grouped wgrad"), dw[g], 1);
      compare("grouped_linear_backward dbias (f32 main grad)", dt, download(*db_dev[g], "grouped bias grad"), db[g], 1);
    }
  }
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // FAIL lines reach a redirected log even if a later case crashes
  if (!gpu_test::device_visible()) return 77;
  const bool ran = gpu_test::ran_without_exception([] {
    test_router();
    test_permutation();
    test_grouped_linear();
  });
  return ran ? results.summarise("moe ops parity", failures) : 1;
}
