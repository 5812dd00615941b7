// The run-ahead decode step's input update (ops/decode_inputs.h) on the CPU, its reference: each
// row's id becomes the chosen token, its position moves on by one, the key-mask byte of the next
// cache index is set (not past the capacity) and the cached-token count moves on; argument errors.
#include "tessera/ops/decode_inputs.h"

#include <vector>

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

constexpr int kRows = 3, kCapacity = 6;
constexpr int32_t kPad[kRows] = {0, 2, 1}, kChosen[kRows] = {11, 22, 33};

// A decode step's inputs whose token sits at cache index `at` of left-padded rows (as the host's
// batch bookkeeping writes them).
struct Inputs {
  OwnedTensor next{DType::i32, {kRows}}, past{DType::i32, {1}}, mask{DType::u8, {kRows, kCapacity}},
      ids{DType::i32, {kRows}}, positions{DType::i32, {kRows}};
  explicit Inputs(int32_t at) {
    past.at<int32_t>(0) = at;
    for (int b = 0; b < kRows; ++b) {
      next.at<int32_t>(b) = kChosen[b];
      ids.at<int32_t>(b) = 7;
      positions.at<int32_t>(b) = at - kPad[b];
      for (int s = kPad[b]; s <= at; ++s) mask.at<uint8_t>(b * kCapacity + s) = 1;
    }
  }
  void advance() const { ops::advance_decode_inputs(next, past, mask, ids, positions); }
  std::vector<uint8_t> mask_bytes() const { return {mask.data<uint8_t>(), mask.data<uint8_t>() + kRows * kCapacity}; }
};

TEST(OpsDecodeInputs, AdvancesEveryRowToTheNextCacheIndex) {
  const Inputs in(3);
  std::vector<uint8_t> expected = in.mask_bytes();
  for (int b = 0; b < kRows; ++b) expected[b * kCapacity + 4] = 1;
  in.advance();
  EXPECT_EQ(in.past.at<int32_t>(0), 4);
  for (int b = 0; b < kRows; ++b) {
    EXPECT_EQ(in.ids.at<int32_t>(b), kChosen[b]);
    EXPECT_EQ(in.positions.at<int32_t>(b), 4 - kPad[b]);  // the host's position for cache index 4
  }
  EXPECT_EQ(in.mask_bytes(), expected);
  EXPECT_EQ(in.mask.at<uint8_t>(1 * kCapacity + 1), 0);  // padding stays masked
}

TEST(OpsDecodeInputs, TheLastCacheIndexSetsNoMaskByteBeyondTheCapacity) {
  const Inputs in(kCapacity - 1);
  const std::vector<uint8_t> before = in.mask_bytes();
  in.advance();
  EXPECT_EQ(in.past.at<int32_t>(0), kCapacity);
  EXPECT_EQ(in.mask_bytes(), before);
  EXPECT_EQ(in.ids.at<int32_t>(2), kChosen[2]);
}

TEST(OpsDecodeInputs, RejectsWrongDtypesAndShapesBeforeWriting) {
  const Inputs in(2);
  const OwnedTensor wide(DType::i64, {kRows}), short_ids(DType::i32, {kRows - 1});
  const OwnedTensor flat_mask(DType::u8, {kRows * kCapacity});
  EXPECT_THROW(ops::advance_decode_inputs(wide, in.past, in.mask, in.ids, in.positions), Error);
  EXPECT_THROW(ops::advance_decode_inputs(in.next, in.past, in.mask, short_ids, in.positions), Error);
  EXPECT_THROW(ops::advance_decode_inputs(in.next, in.past, flat_mask, in.ids, in.positions), Error);
  EXPECT_EQ(in.past.at<int32_t>(0), 2);
  EXPECT_EQ(in.ids.at<int32_t>(0), 7);
}

}  // namespace
}  // namespace tessera
