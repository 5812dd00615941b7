// Deterministic column sums (deterministic mode, kernels.h): the rows are cut into chunks, a block of
// 32 columns x kDetRowThreads threads sums one chunk's rows of 32 columns (each thread its rows in
// increasing order, then the threads in order) into a per-chunk partial, and a second kernel adds the
// chunks in chunk order. The chunking depends on the row count only, so the result is bitwise the
// same on every run.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tessera::kernels {

constexpr int kDetRowThreads = 8;    // threads along the rows of one column
constexpr int64_t kDetMaxChunks = 64;  // partial sums per column (scratch: chunks x columns floats)

inline int64_t det_column_chunks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(kDetMaxChunks, (rows + 127) / 128));
}
inline int64_t det_chunk_rows(int64_t rows) {
  const int64_t chunks = det_column_chunks(rows);
  return std::max<int64_t>(1, (rows + chunks - 1) / chunks);
}
inline dim3 det_column_grid(int64_t columns, int64_t rows) {
  return dim3(static_cast<unsigned>((columns + 31) / 32), static_cast<unsigned>(det_column_chunks(rows)));
}

}  // namespace tessera::kernels
