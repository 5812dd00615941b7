// The host side of the MoE device ops (ops/moe_device.h): moe_slot_rows inverts a permutation's
// row_slot (dropped slots -1, padding rows skipped), and every device op refuses host tensors with
// an error naming the op (a CPU-only build: no CUDA backend; a CUDA build: not a CUDA tensor).
// The kernels themselves are checked on a GPU by test/gpu/moe_ops_parity_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "op_test_util.h"
#include "tessera/ops/moe_capacity.h"
#include "tessera/ops/moe_device.h"
#include "tessera/ops/moe_permute.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(MoeDevice, SlotRowsInvertThePermutationWithDropsAndPadding) {
  // 3 tokens, top-1 over 2 experts: tokens 0 and 2 pick expert 1, token 1 expert 0.
  ops::Routing r;
  r.tokens = 3, r.topk = 1, r.num_experts = 2;
  r.experts = {1, 0, 1};
  r.probs = {1.0f, 1.0f, 0.5f};
  r.kept = {1, 1, 1};
  EXPECT_EQ(ops::moe_drop_over_capacity(r, 1), 1);  // expert 1 keeps slot 0 (higher weight), drops slot 2
  const ops::Permutation p = ops::moe_make_permutation(r, /*pad_to=*/1);
  // expert 0: row 0 = slot 1; expert 1: row 1 = slot 0.
  EXPECT_EQ(p.row_slot, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ops::moe_slot_rows(p), (std::vector<int64_t>{1, 0, -1}));
  const ops::Permutation padded = ops::moe_make_permutation(r, /*pad_to=*/2);  // a padding row per expert
  EXPECT_EQ(padded.row_slot, (std::vector<int64_t>{1, -1, 0, -1}));
  EXPECT_EQ(ops::moe_slot_rows(padded), (std::vector<int64_t>{2, 0, -1}));
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(MoeDevice, HostTensorsAreRefusedNamingTheOp) {
  OwnedTensor logits(DType::f32, {2, 4}), probs(DType::f32, {4}), dlogits(DType::f32, {2, 4});
  OwnedTensor experts(DType::i32, {4}), counts(DType::i64, {4}), slots(DType::i64, {4});
  OwnedTensor x(DType::f32, {2, 8}), rows(DType::f32, {4, 8});
  ops::RouterOptions o;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"moe_router_forward_device",
       error_of([&] { ops::moe_router_forward_device(logits.tensor(), o, experts.tensor(), probs.tensor()); })},
      {"moe_router_backward_device", error_of([&] {
         ops::moe_router_backward_device(logits.tensor(), experts.tensor(), o, probs.tensor(), dlogits.tensor());
       })},
      {"moe_expert_counts_device",
       error_of([&] { ops::moe_expert_counts_device(experts.tensor(), counts.tensor()); })},
      {"moe_permute_forward_device",
       error_of([&] { ops::moe_permute_forward_device(x.tensor(), slots.tensor(), 2, rows.tensor()); })},
      {"moe_unpermute_forward_device",
       error_of([&] { ops::moe_unpermute_forward_device(rows.tensor(), slots.tensor(), probs.tensor(), x.tensor()); })},
  };
  for (const auto& [op, message] : cases) EXPECT_NE(message.find(op), std::string::npos) << op << ": " << message;
}

}  // namespace
}  // namespace tessera
