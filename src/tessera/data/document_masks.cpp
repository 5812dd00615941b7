#include "tessera/data/document_masks.h"

#include "tessera/core/error.h"

namespace tessera::data {

void apply_document_masks(const DocumentMaskOptions& o, std::span<const int32_t> inputs, std::span<float> loss_mask,
                          std::span<int32_t> position_ids, std::span<int32_t> document_ids) {
  const size_t s = inputs.size();
  TESSERA_CHECK(loss_mask.size() == s && position_ids.size() == s && document_ids.size() == s,
                "apply_document_masks: spans of ", s, ", ", loss_mask.size(), ", ", position_ids.size(), " and ",
                document_ids.size(), " values");
  int32_t position = 0, document = 0;
  for (size_t i = 0; i < s; ++i) {
    position_ids[i] = o.reset_position_ids ? position : static_cast<int32_t>(i);
    document_ids[i] = o.reset_attention_mask ? document : 0;
    ++position;
    if (inputs[i] == o.eod) {
      if (o.eod_mask_loss) loss_mask[i] = 0.0f;
      position = 0;  // the next token starts a document
      ++document;
    }
  }
}

}  // namespace tessera::data
