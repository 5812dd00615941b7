// CPU reference of core self-attention (see attention.h): scores, masked softmax, dropout and the
// weighted sum run per (batch, head) as GEMMs on strided views of the QKV rows.
#include "tessera/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/ops/cpu/blas.h"
#include "tessera/ops/cpu/dropout.h"

namespace tessera::ops::cpu {

namespace {

// Where head `head` of batch element `batch_index` finds its q, k and v columns, and the row stride
// between consecutive sequence positions.
struct HeadViews {
  int64_t q_offset, k_offset, v_offset, qkv_row_stride;
  int64_t out_offset, out_row_stride;
  int64_t probs_offset;
  int64_t dropout_offset;  // flat index of the block's first element in the dropout index space
};

HeadViews head_views(const AttentionDims& d, int64_t batch_index, int64_t head) {
  const int64_t heads_per_group = d.num_heads / d.num_query_groups;
  const int64_t group = head / heads_per_group, within = head % heads_per_group;
  const int64_t qkv_width = (d.num_heads + 2 * d.num_query_groups) * d.head_dim;
  const int64_t group_base = batch_index * qkv_width + group * (heads_per_group + 2) * d.head_dim;
  HeadViews v;
  v.q_offset = group_base + within * d.head_dim;
  v.k_offset = group_base + heads_per_group * d.head_dim;
  v.v_offset = v.k_offset + d.head_dim;
  v.qkv_row_stride = d.batch * qkv_width;
  v.out_offset = batch_index * d.num_heads * d.head_dim + head * d.head_dim;
  v.out_row_stride = d.batch * d.num_heads * d.head_dim;
  v.probs_offset = (batch_index * d.num_heads + head) * d.seq * d.seq;
  const int64_t dropout_heads = d.dropout_heads > 0 ? d.dropout_heads : d.num_heads;
  v.dropout_offset = (batch_index * dropout_heads + d.dropout_first_head + head) * d.seq * d.seq;
  return v;
}

// Writes dropped[i] = probs[i] * keep(probs_offset + i) / (1 - p) over one [s, s] block; entries with
// probability 0 (masked keys) stay 0 without drawing.
template <typename T>
void apply_probs_dropout(const T* probs, int64_t count, double p, const RandomStream& stream, int64_t probs_offset,
                         T* dropped) {
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < count; ++i) {
    const T prob = probs[i];
    dropped[i] = prob != T(0) && dropout_keeps(stream, static_cast<uint64_t>(probs_offset + i), p)
                     ? prob * keep_scale : T(0);
  }
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, const uint8_t* key_padding_mask, const int32_t* document_ids,
                       const AttentionDims& d, bool causal, double dropout, const RandomStream& dropout_stream, T* out,
                       T* probs) {
  const int64_t s = d.seq, hn = d.head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hn)));
  std::vector<T> dropped(dropout > 0.0 ? static_cast<size_t>(s * s) : 0);
  std::vector<uint8_t> allowed(static_cast<size_t>(s * s));  // [i, j]: query i attends key j
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j)
        allowed[static_cast<size_t>(i * s + j)] = attends(s, bi, i, j, causal, key_padding_mask, document_ids);
    for (int64_t head = 0; head < d.num_heads; ++head) {
      const HeadViews v = head_views(d, bi, head);
      T* p = probs + v.probs_offset;
      // scores = scale * q . k^T  ([s, s])
      gemm<T>(false, true, s, s, hn, scale, qkv + v.q_offset, v.qkv_row_stride, qkv + v.k_offset, v.qkv_row_stride,
              T(0), p, s);
      if (!d.alibi_slopes.empty()) {
        const double slope = d.alibi_slopes[static_cast<size_t>(head)];
        for (int64_t i = 0; i < s; ++i)
          for (int64_t j = 0; j < s; ++j) p[i * s + j] += static_cast<T>(alibi_bias(slope, i, j));
      }
      for (int64_t i = 0; i < s; ++i) {
        T* row = p + i * s;
        const uint8_t* keys = allowed.data() + i * s;
        T row_max = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < s; ++j)
          if (keys[j]) row_max = std::max(row_max, row[j]);
        if (row_max == -std::numeric_limits<T>::infinity()) {  // no key left: zero probabilities
          std::fill(row, row + s, T(0));
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < s; ++j) {
          const T e = keys[j] ? std::exp(row[j] - row_max) : T(0);
          row[j] = e;
          sum += e;
        }
        const T inverse = T(1) / sum;
        for (int64_t j = 0; j < s; ++j) row[j] *= inverse;
      }
      const T* weights = p;
      if (dropout > 0.0) {
        apply_probs_dropout(p, s * s, dropout, dropout_stream, v.dropout_offset, dropped.data());
        weights = dropped.data();
      }
      // out = weights . v  ([s, hn])
      gemm<T>(false, false, s, hn, s, T(1), weights, s, qkv + v.v_offset, v.qkv_row_stride, T(0), out + v.out_offset,
              v.out_row_stride);
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, const AttentionDims& d, double dropout,
                        const RandomStream& dropout_stream, T* dqkv) {
  const int64_t s = d.seq, hn = d.head_dim;
  const int64_t qkv_numel = s * d.batch * (d.num_heads + 2 * d.num_query_groups) * hn;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hn)));
  const T keep_scale = static_cast<T>(1.0 / (1.0 - dropout));
  std::fill(dqkv, dqkv + qkv_numel, T(0));  // k and v gradients accumulate over the heads of a group
  std::vector<T> dropped(dropout > 0.0 ? static_cast<size_t>(s * s) : 0);
  std::vector<T> dscores(static_cast<size_t>(s * s));
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    for (int64_t head = 0; head < d.num_heads; ++head) {
      const HeadViews v = head_views(d, bi, head);
      const T* p = probs + v.probs_offset;
      const T* weights = p;
      if (dropout > 0.0) {
        apply_probs_dropout(p, s * s, dropout, dropout_stream, v.dropout_offset, dropped.data());
        weights = dropped.data();
      }
      // dv += weights^T . dout  ([s, hn])
      gemm<T>(true, false, s, hn, s, T(1), weights, s, dout + v.out_offset, v.out_row_stride, T(1),
              dqkv + v.v_offset, v.qkv_row_stride);
      // dweights = dout . v^T  ([s, s]), then through dropout and the softmax Jacobian:
      // dscores = scale * p * (dprobs - sum_j p dprobs)
      gemm<T>(false, true, s, s, hn, T(1), dout + v.out_offset, v.out_row_stride, qkv + v.v_offset, v.qkv_row_stride,
              T(0), dscores.data(), s);
      for (int64_t i = 0; i < s; ++i) {
        T* drow = dscores.data() + i * s;
        const T* prow = p + i * s;
        if (dropout > 0.0) {
          const T* wrow = weights + i * s;
          // weights = p * keep / (1 - p_drop): dprobs = dweights * keep / (1 - p_drop)
          for (int64_t j = 0; j < s; ++j) drow[j] = wrow[j] != T(0) ? drow[j] * keep_scale : T(0);
        }
        T dot = 0;
        for (int64_t j = 0; j < s; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j < s; ++j) drow[j] = scale * prow[j] * (drow[j] - dot);
      }
      // dq = dscores . k;  dk += dscores^T . q
      gemm<T>(false, false, s, hn, s, T(1), dscores.data(), s, qkv + v.k_offset, v.qkv_row_stride, T(1),
              dqkv + v.q_offset, v.qkv_row_stride);
      gemm<T>(true, false, s, hn, s, T(1), dscores.data(), s, qkv + v.q_offset, v.qkv_row_stride, T(1),
              dqkv + v.k_offset, v.qkv_row_stride);
    }
  }
}

template void attention_forward<float>(const float*, const uint8_t*, const int32_t*, const AttentionDims&, bool,
                                       double, const RandomStream&, float*, float*);
template void attention_forward<double>(const double*, const uint8_t*, const int32_t*, const AttentionDims&, bool,
                                        double, const RandomStream&, double*, double*);
template void attention_backward<float>(const float*, const float*, const float*, const AttentionDims&, double,
                                        const RandomStream&, float*);
template void attention_backward<double>(const double*, const double*, const double*, const AttentionDims&, double,
                                         const RandomStream&, double*);

}  // namespace tessera::ops::cpu
