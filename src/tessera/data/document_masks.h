// Megatron's end-of-document options (get_ltor_masks_and_position_ids) for one sample of a GPT
// batch, whose inputs may hold several documents separated by the end-of-document token:
//   eod_mask_loss       the loss mask is 0 where the input token is eod;
//   reset_position_ids  positions restart at 0 after every eod (the eod keeps its position);
//   reset_attention_mask tokens after an eod attend only within their document: document_ids
//                        numbers each token's document (0 for the first; the eod belongs to the
//                        document it ends), and a token attends keys of its own number only.
#pragma once
#include <cstdint>
#include <span>

namespace tessera::data {

struct DocumentMaskOptions {
  int32_t eod = -1;
  bool eod_mask_loss = false, reset_position_ids = false, reset_attention_mask = false;
  bool any() const { return eod_mask_loss || reset_position_ids || reset_attention_mask; }
};

// inputs, loss_mask, position_ids, document_ids: s values each (the sample's inputs, not labels).
// position_ids and document_ids are always written (0..s-1 and 0 without the resets).
void apply_document_masks(const DocumentMaskOptions& options, std::span<const int32_t> inputs,
                          std::span<float> loss_mask, std::span<int32_t> position_ids,
                          std::span<int32_t> document_ids);

}  // namespace tessera::data
