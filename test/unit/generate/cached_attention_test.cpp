// Attention over the KV cache (a prefill, then one token at a time, with left padding) equals the
// full causal attention with the same key padding mask, query by query; with ALiBi too (the
// training attention's -slope |i - j|, also for a tensor-parallel slice of the heads).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/rng.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/cached_attention.h"

namespace tessera {
namespace {

void prefill_then_steps_equal_full_attention(bool alibi, int64_t alibi_heads, int64_t alibi_first_head) {
  const int64_t seq = 7, batch = 3, na = 4, ng = 2, hn = 8, prefill = 4, capacity = 9;
  const int64_t width = (na + 2 * ng) * hn;
  std::vector<float> qkv(static_cast<size_t>(seq * batch * width));
  RandomStream stream(7, stream_id("cached_attention_test"));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = stream.normal(i);
  // Row 0 unpadded, row 1 with 2 padding tokens, row 2 with 3.
  std::vector<uint8_t> full_mask(static_cast<size_t>(batch * seq), 1), cache_mask(static_cast<size_t>(batch * capacity), 0);
  const int64_t pad[] = {0, 2, 3};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      full_mask[b * seq + s] = s >= pad[b];
      cache_mask[b * capacity + s] = s >= pad[b];
    }
  ops::AttentionParams p;
  p.num_heads = na;
  p.num_query_groups = ng;
  p.head_dim = hn;
  p.alibi = alibi;
  p.alibi_heads = alibi_heads;
  p.alibi_first_head = alibi_first_head;
  std::vector<float> expected(static_cast<size_t>(seq * batch * na * hn)), probs(static_cast<size_t>(batch * na * seq * seq));
  ops::attention_forward(Tensor(qkv.data(), DType::f32, {seq, batch, width}),
                         Tensor(full_mask.data(), DType::u8, {batch, seq}), p, stream,
                         Tensor(expected.data(), DType::f32, {seq, batch, na * hn}),
                         Tensor(probs.data(), DType::f32, {batch, na, seq, seq}));

  std::vector<float> k(static_cast<size_t>(batch * capacity * ng * hn)), v(k.size()), out(expected.size());
  Tensor kc(k.data(), DType::f32, {batch, capacity, ng * hn}), vc(v.data(), DType::f32, {batch, capacity, ng * hn});
  Tensor mask(cache_mask.data(), DType::u8, {batch, capacity});
  const size_t row = static_cast<size_t>(batch * width), out_row = static_cast<size_t>(batch * na * hn);
  ops::cached_attention_forward(Tensor(qkv.data(), DType::f32, {prefill, batch, width}), mask, p, kc, vc, 0,
                                Tensor(out.data(), DType::f32, {prefill, batch, na * hn}));
  for (int64_t s = prefill; s < seq; ++s)
    ops::cached_attention_forward(Tensor(qkv.data() + s * row, DType::f32, {1, batch, width}), mask, p, kc, vc, s,
                                  Tensor(out.data() + s * out_row, DType::f32, {1, batch, na * hn}));
  double max_diff = 0;
  for (size_t i = 0; i < out.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::abs(out[i] - expected[i])));
  EXPECT_LT(max_diff, 1e-5);
  // A padding query attends to nothing: a zero row (row 2's first token).
  for (int64_t e = 0; e < na * hn; ++e) EXPECT_EQ(out[2 * na * hn + e], 0.0f);
}

TEST(CachedAttention, PrefillThenStepsEqualFullAttention) { prefill_then_steps_equal_full_attention(false, 0, 0); }

TEST(CachedAttention, AlibiEqualsFullAttention) {
  prefill_then_steps_equal_full_attention(true, 0, 0);
  prefill_then_steps_equal_full_attention(true, 12, 4);  // heads 4..7 of 12 (a TP rank's slice)
}

TEST(CachedAttention, AlibiChangesTheOutput) {  // the bias is applied at all
  const int64_t batch = 1, na = 2, ng = 2, hn = 4, capacity = 4, width = (na + 2 * ng) * hn;
  std::vector<float> qkv(static_cast<size_t>(capacity * width));
  RandomStream stream(3, stream_id("cached_attention_alibi"));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = stream.normal(i);
  std::vector<float> outs[2];
  for (int alibi = 0; alibi < 2; ++alibi) {
    ops::AttentionParams p;
    p.num_heads = na;
    p.num_query_groups = ng;
    p.head_dim = hn;
    p.alibi = alibi == 1;
    std::vector<float> k(static_cast<size_t>(capacity * ng * hn)), v(k.size());
    outs[alibi].resize(static_cast<size_t>(capacity * na * hn));
    ops::cached_attention_forward(Tensor(qkv.data(), DType::f32, {capacity, batch, width}), Tensor(), p,
                                  Tensor(k.data(), DType::f32, {batch, capacity, ng * hn}),
                                  Tensor(v.data(), DType::f32, {batch, capacity, ng * hn}), 0,
                                  Tensor(outs[alibi].data(), DType::f32, {capacity, batch, na * hn}));
  }
  double diff = 0;
  for (size_t i = 0; i < outs[0].size(); ++i) diff = std::max(diff, static_cast<double>(std::abs(outs[0][i] - outs[1][i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(CachedAttention, RejectsTokensBeyondTheCache) {
  const int64_t batch = 1, na = 2, ng = 2, hn = 4, capacity = 3, width = (na + 2 * ng) * hn;
  std::vector<float> qkv(static_cast<size_t>(2 * width)), k(static_cast<size_t>(capacity * ng * hn)), v(k.size()),
      out(static_cast<size_t>(2 * na * hn));
  ops::AttentionParams p;
  p.num_heads = na;
  p.num_query_groups = ng;
  p.head_dim = hn;
  EXPECT_THROW(ops::cached_attention_forward(Tensor(qkv.data(), DType::f32, {2, batch, width}), Tensor(), p,
                                             Tensor(k.data(), DType::f32, {batch, capacity, ng * hn}),
                                             Tensor(v.data(), DType::f32, {batch, capacity, ng * hn}), 2,
                                             Tensor(out.data(), DType::f32, {2, batch, na * hn})),
               Error);
}

}  // namespace
}  // namespace tessera
