// Permutation by expert and the weighted combine (moe_permute.h), CPU reference.
#include "tessera/ops/moe_permute.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

int64_t Permutation::first_row(int64_t expert) const {
  int64_t offset = 0;
  for (int64_t e = 0; e < expert; ++e) offset += rows_per_expert.at(static_cast<size_t>(e));
  return offset;
}

Permutation moe_make_permutation(const Routing& r, int64_t pad_to) {
  Permutation p;
  p.tokens = r.tokens;
  p.topk = r.topk;
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(r.num_experts));
  for (size_t s = 0; s < r.experts.size(); ++s)
    if (r.kept[s]) slots[static_cast<size_t>(r.experts[s])].push_back(static_cast<int64_t>(s));
  for (auto& list : slots) {
    if (pad_to > 0) {
      TESSERA_CHECK(static_cast<int64_t>(list.size()) <= pad_to, "moe_make_permutation: an expert has ",
                    list.size(), " kept slots, more than the padded capacity ", pad_to);
      list.resize(static_cast<size_t>(pad_to), -1);
    }
    p.rows_per_expert.push_back(static_cast<int64_t>(list.size()));
    p.row_slot.insert(p.row_slot.end(), list.begin(), list.end());
  }
  return p;
}

namespace {
int64_t check_pair(const char* op, const Tensor& rows, const char* rows_name, const Tensor& tokens,
                   const char* tokens_name, const Permutation& p) {
  for (const auto& [t, n] : {std::pair{&rows, rows_name}, std::pair{&tokens, tokens_name}}) {
    detail::require_defined(op, *t, n);
    detail::require_cpu(op, {t});
    detail::require_dtype(op, *t, DType::f32, n);
    if (t->ndim() != 2) TESSERA_FAIL(op, ": ", n, " must be 2-D, got ", t->describe());
  }
  if (rows.dim(0) != p.rows() || tokens.dim(0) != p.tokens || rows.dim(1) != tokens.dim(1))
    TESSERA_FAIL(op, ": ", rows_name, " ", rows.describe(), " and ", tokens_name, " ", tokens.describe(),
                 " do not fit a permutation of ", p.tokens, " tokens into ", p.rows(), " rows");
  return rows.dim(1);
}
void check_probs(const char* op, std::span<const float> probs, const Permutation& p) {
  if (static_cast<int64_t>(probs.size()) != p.tokens * p.topk)
    TESSERA_FAIL(op, ": ", probs.size(), " probs for ", p.tokens, " tokens x topk ", p.topk);
}
}  // namespace

void moe_permute_forward(const Tensor& x, const Permutation& p, const Tensor& out) {
  const int64_t h = check_pair("moe_permute_forward", out, "out", x, "x", p);
  const float* in = x.data_as<float>();
  float* o = out.data_as<float>();
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t slot = p.row_slot[static_cast<size_t>(r)];
    if (slot < 0) std::fill(o + r * h, o + (r + 1) * h, 0.0f);
    else std::memcpy(o + r * h, in + (slot / p.topk) * h, static_cast<size_t>(h) * sizeof(float));
  }
}

void moe_permute_backward(const Tensor& dout, const Permutation& p, const Tensor& dx) {
  const int64_t h = check_pair("moe_permute_backward", dout, "dout", dx, "dx", p);
  const float* d = dout.data_as<float>();
  float* g = dx.data_as<float>();
  std::fill(g, g + p.tokens * h, 0.0f);
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t slot = p.row_slot[static_cast<size_t>(r)];
    if (slot < 0) continue;
    float* row = g + (slot / p.topk) * h;
    for (int64_t i = 0; i < h; ++i) row[i] += d[r * h + i];
  }
}

void moe_unpermute_forward(const Tensor& expert_out, const Permutation& p, std::span<const float> probs,
                           const Tensor& y) {
  const char* op = "moe_unpermute_forward";
  const int64_t h = check_pair(op, expert_out, "expert_out", y, "y", p);
  check_probs(op, probs, p);
  const float* e = expert_out.data_as<float>();
  float* o = y.data_as<float>();
  std::fill(o, o + p.tokens * h, 0.0f);
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t slot = p.row_slot[static_cast<size_t>(r)];
    if (slot < 0) continue;
    const float w = probs[static_cast<size_t>(slot)];
    float* row = o + (slot / p.topk) * h;
    for (int64_t i = 0; i < h; ++i) row[i] += w * e[r * h + i];
  }
}

void moe_unpermute_backward(const Tensor& dy, const Tensor& expert_out, const Permutation& p,
                            std::span<const float> probs, const Tensor& dexpert_out, std::span<float> dprobs) {
  const char* op = "moe_unpermute_backward";
  const int64_t h = check_pair(op, expert_out, "expert_out", dy, "dy", p);
  check_pair(op, dexpert_out, "dexpert_out", dy, "dy", p);
  check_probs(op, probs, p);
  if (dprobs.size() != probs.size()) TESSERA_FAIL(op, ": dprobs has ", dprobs.size(), " entries, probs ", probs.size());
  const float* g = dy.data_as<float>();
  const float* e = expert_out.data_as<float>();
  float* de = dexpert_out.data_as<float>();
  std::fill(dprobs.begin(), dprobs.end(), 0.0f);
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t slot = p.row_slot[static_cast<size_t>(r)];
    if (slot < 0) {
      std::fill(de + r * h, de + (r + 1) * h, 0.0f);
      continue;
    }
    const float w = probs[static_cast<size_t>(slot)];
    const float* grow = g + (slot / p.topk) * h;
    double dot = 0;
    for (int64_t i = 0; i < h; ++i) {
      de[r * h + i] = w * grow[i];
      dot += static_cast<double>(grow[i]) * e[r * h + i];
    }
    dprobs[static_cast<size_t>(slot)] = static_cast<float>(dot);
  }
}

}  // namespace tessera::ops
