// Vocabulary padding as Megatron: the embedding table has a multiple of
// make_vocab_size_divisible_by x tensor-parallel size rows; the extra rows are dummy tokens.
#pragma once
#include <cstdint>

namespace tessera::models {

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size = 1);
void log_padded_vocab(int64_t vocab_size, int64_t padded);  // "padded vocab (size: V) with N dummy tokens (new size: V')"

}  // namespace tessera::models
