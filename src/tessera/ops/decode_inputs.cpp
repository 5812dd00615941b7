#include "tessera/ops/decode_inputs.h"

#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

void advance_decode_inputs(const Tensor& next, const Tensor& past, const Tensor& key_mask, const Tensor& ids,
                           const Tensor& positions) {
  const char* op = "advance_decode_inputs";
  TESSERA_CHECK(key_mask.ndim() == 2, op, ": key_mask must be [rows, capacity], got ", key_mask.describe());
  const int64_t rows = key_mask.dim(0), capacity = key_mask.dim(1);
  expect_tensor(key_mask, DType::u8, {rows, capacity}, "advance_decode_inputs: key_mask");
  expect_tensor(next, DType::i32, {rows}, "advance_decode_inputs: next");
  expect_tensor(past, DType::i32, {1}, "advance_decode_inputs: past");
  expect_tensor(ids, DType::i32, {rows}, "advance_decode_inputs: ids");
  expect_tensor(positions, DType::i32, {rows}, "advance_decode_inputs: positions");
  if (detail::runs_on_cuda(op, {&next, &past, &key_mask, &ids, &positions}))
    return TESSERA_CUDA_OP(advance_decode_inputs(next, past, key_mask, ids, positions));
  int32_t* count = past.data_as<int32_t>();
  const int64_t at = static_cast<int64_t>(*count) + 1;  // the next step's token's cache index
  for (int64_t b = 0; b < rows; ++b) {
    ids.data_as<int32_t>()[b] = next.data_as<int32_t>()[b];
    positions.data_as<int32_t>()[b] += 1;
    if (at < capacity) key_mask.data_as<uint8_t>()[b * capacity + at] = 1;
  }
  *count = static_cast<int32_t>(at);
}

}  // namespace tessera::ops
