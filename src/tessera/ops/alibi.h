// ALiBi (Press et al., "Train Short, Test Long"; BLOOM's build_alibi_tensor for head counts that are
// not powers of two): attention score (i, j) gets -slope_h * |i - j| added before the softmax (for a
// causal mask that is slope_h * (j - i)), no position embedding. Slopes of n heads: with
// p = 2^floor(log2 n), heads 0..p-1 get 2^(-8 (k+1) / p); the n - p others take every other slope of
// 2p heads, 2^(-8 (2k+1) / (2p)), k = 0..n-p-1. A tensor-parallel rank uses the slopes of the global
// heads it holds (AttentionParams::alibi_first_head), so TP reproduces TP = 1.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::ops {

// Slope of global head `head` of `num_heads` (0 <= head < num_heads).
double alibi_slope(int64_t head, int64_t num_heads);
// Slopes of heads [first_head, first_head + count) of num_heads.
std::vector<double> alibi_slopes(int64_t num_heads, int64_t first_head = 0, int64_t count = -1);

}  // namespace tessera::ops
