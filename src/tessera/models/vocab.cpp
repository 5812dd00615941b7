#include "tessera/models/vocab.h"

#include "tessera/core/logging.h"

namespace tessera::models {

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size) {
  int64_t multiple = divisible_by * tensor_parallel_size;
  TESSERA_CHECK(vocab_size > 0 && multiple > 0, "vocabulary size ", vocab_size, " and padding multiple ", multiple,
                " must be positive");
  return (vocab_size + multiple - 1) / multiple * multiple;
}

void log_padded_vocab(int64_t vocab_size, int64_t padded) {
  log::info(" > padded vocab (size: ", vocab_size, ") with ", padded - vocab_size, " dummy tokens (new size: ", padded,
            ")");
}

}  // namespace tessera::models
