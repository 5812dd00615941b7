// Megatron's end-of-document options against hand-written expectations (get_ltor_masks_and_position_ids).
#include <gtest/gtest.h>

#include <vector>

#include "tessera/data/document_masks.h"

namespace tessera {
namespace {

struct Result {
  std::vector<float> mask;
  std::vector<int32_t> positions, documents;
};

Result run(const data::DocumentMaskOptions& o, const std::vector<int32_t>& inputs) {
  Result r{std::vector<float>(inputs.size(), 1.0f), std::vector<int32_t>(inputs.size(), -1),
           std::vector<int32_t>(inputs.size(), -1)};
  data::apply_document_masks(o, inputs, r.mask, r.positions, r.documents);
  return r;
}

const std::vector<int32_t> kInputs = {5, 6, 0, 7, 8, 9, 0, 0, 4};  // eod = 0

TEST(DocumentMasks, NothingSetGivesPlainPositionsAndOneDocument) {
  Result r = run({0, false, false, false}, kInputs);
  EXPECT_EQ(r.mask, std::vector<float>(9, 1.0f));
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(r.documents, std::vector<int32_t>(9, 0));
}

TEST(DocumentMasks, EodMaskLossZeroesTheEodInputs) {
  Result r = run({0, true, false, false}, kInputs);
  EXPECT_EQ(r.mask, (std::vector<float>{1, 1, 0, 1, 1, 1, 0, 0, 1}));
}

TEST(DocumentMasks, ResetPositionIdsRestartsAfterEveryEod) {
  // Megatron: position_ids[b, i+1:] -= i + 1 - prev_index at each eod index i.
  Result r = run({0, false, true, false}, kInputs);
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 0}));
  EXPECT_EQ(r.mask, std::vector<float>(9, 1.0f));
}

TEST(DocumentMasks, ResetAttentionMaskNumbersTheDocuments) {
  // Megatron: attention_mask[b, 0, i+1:, :i+1] = 0, so a token sees keys of its own document only.
  Result r = run({0, false, false, true}, kInputs);
  EXPECT_EQ(r.documents, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 2, 3}));
}

TEST(DocumentMasks, AllThreeCombineAsMegatronsFunction) {
  // eod = 3: a sample opening with an eod, two eods in a row and one at the end. Megatron's loop over
  // the eod indices i = 0, 4, 5, 9 gives positions restarting after each, mask[i+1:, :i+1] = 0
  // (documents 0 | 1..4 | 5 | 6..9), and no loss on the eod inputs.
  const std::vector<int32_t> inputs = {3, 8, 8, 8, 3, 3, 8, 8, 8, 3};
  Result r = run({3, true, true, true}, inputs);
  EXPECT_EQ(r.documents, (std::vector<int32_t>{0, 1, 1, 1, 1, 2, 3, 3, 3, 3}));
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 0, 1, 2, 3, 0, 0, 1, 2, 3}));
  EXPECT_EQ(r.mask, (std::vector<float>{0, 1, 1, 1, 0, 0, 1, 1, 1, 0}));
  // Without eod_mask_loss the mask is left as the dataset gave it, the other two unchanged.
  Result no_loss_mask = run({3, false, true, true}, inputs);
  EXPECT_EQ(no_loss_mask.mask, std::vector<float>(10, 1.0f));
  EXPECT_EQ(no_loss_mask.documents, r.documents);
  EXPECT_EQ(no_loss_mask.positions, r.positions);
}

}  // namespace
}  // namespace tessera
