// CPU reference of the embedding lookup and its scatter-add gradient, on raw arrays (float, double).
// ids [n], table / dtable [vocab, hidden], out / dout [n, hidden].
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// Fails (naming the id and its position) before writing anything if an id is outside [0, vocab).
template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t hidden, T* out);
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t hidden, T* dtable);

}  // namespace tessera::ops::cpu
