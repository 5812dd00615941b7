// Launch declarations of the CUDA kernels (kernels/*.cu). Plain pointers, element counts and the
// storage DType (f32, bf16, f16; statistics and accumulation in fp32); every launch goes on `stream`
// and is asynchronous. Host-side checks live in src/tessera/ops/cuda/; these trust their arguments.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

struct DropoutArgs {
  double p = 0.0;  // in [0, 1); 0 = identity
  uint64_t seed = 0, stream = 0, offset = 0;
};

// --- elementwise.cu
void gelu_forward(DType t, const void* in, const void* bias, int64_t n, int64_t cols, void* out, cudaStream_t s);
// bias (nullable, [cols]) is added before the GeLU: the fused bias+GeLU of Megatron.
void gelu_backward(DType t, const void* dout, const void* in, int64_t n, void* din, cudaStream_t s);
// Exact (erf) GeLU, or tanh when is_tanh; backward din = dout * f'(in).
void activation_forward(bool is_tanh, DType t, const void* in, int64_t n, void* out, cudaStream_t s);
void activation_backward(bool is_tanh, DType t, const void* dout, const void* in, int64_t n, void* din,
                         cudaStream_t s);
// --- swiglu.cu: out[j] = silu(in[2j]) * in[2j+1] over count units; din pairs (dgate, dup).
void swiglu_forward(DType t, const void* in, int64_t count, void* out, cudaStream_t s);
void swiglu_backward(DType t, const void* dout, const void* in, int64_t count, void* din, cudaStream_t s);
void dropout_apply(DType t, const void* in, int64_t n, const DropoutArgs& d, void* out, cudaStream_t s);
void add(DType t, const void* a, const void* b, int64_t n, void* out, cudaStream_t s);
void scale(DType t, void* dst, int64_t n, double factor, cudaStream_t s);
void fill(DType t, void* dst, int64_t n, double value, cudaStream_t s);  // float and integer dtypes
void convert(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, cudaStream_t s);
// Deterministic scalar sums take `partials` (kReductionPartials doubles of device scratch, or null for
// the atomic path): per-block partial sums, added to *total in block order by a second kernel.
constexpr int64_t kReductionPartials = 1024;
// *total (device double) += sum x^2 (fp32 per block, double across blocks).
void sum_of_squares(DType t, const void* x, int64_t n, double* total, cudaStream_t s, double* partials = nullptr);
// --- column_sums.cu: dbias[c] += sum_r dout[r, c]; dbias of dtype g (f32 main grad or t). scratch:
// column_sum_scratch_floats(rows, cols) floats of device memory (null, or that count 0: one pass over
// the columns only). Fixed summation order either way (bitwise reproducible).
int64_t column_sum_scratch_floats(int64_t rows, int64_t cols);
void column_sum_accumulate(DType t, const void* dout, int64_t rows, int64_t cols, DType g, void* dbias, cudaStream_t s,
                           float* scratch = nullptr);
// AdamW on f32 param/grad/moments; bias corrections precomputed by the caller.
void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2, cudaStream_t s);

// --- embedding.cu (an id outside [0, V) gives a NaN row / no gradient; the host cannot check without a sync)
void embedding_forward(DType t, const int32_t* ids, int64_t n, const void* table, int64_t vocab, int64_t hidden,
                       void* out, cudaStream_t s);
// det_scratch (embedding_backward_scratch_bytes(n) bytes) or null: deterministic (sorted, no atomics;
// bitwise the CPU reference's sum in position order) or the atomic scatter-add.
size_t embedding_backward_scratch_bytes(int64_t n);
void embedding_backward(DType t, const int32_t* ids, int64_t n, const void* dout, int64_t vocab, int64_t hidden,
                        DType g, void* dtable, cudaStream_t s, void* det_scratch = nullptr);

// Deterministic mode (ops/deterministic_mode.h): a launcher taking `deterministic` then reduces in a
// fixed order (no float atomics), so its result is bitwise the same on every run.

// --- layernorm.cu: mean/rstd of dtype stat_t (t or f32); weight/bias of dtype t; dweight/dbias of g.
void layernorm_forward(DType t, const void* in, const void* weight, const void* bias, double eps, int64_t rows,
                       int64_t hidden, void* out, DType stat_t, void* mean, void* rstd, cudaStream_t s);
// scratch: layernorm_backward_scratch_floats(rows, hidden, deterministic) floats of device memory.
int64_t layernorm_backward_scratch_floats(int64_t rows, int64_t hidden, bool deterministic);
// residual_grad (may be null; same dtype and shape as din): added to din before its rounding.
void layernorm_backward(DType t, const void* dout, const void* in, const void* weight, DType stat_t, const void* mean,
                        const void* rstd, int64_t rows, int64_t hidden, void* din, DType g, void* dweight, void* dbias,
                        const void* residual_grad, float* scratch, cudaStream_t s, bool deterministic = false);

// --- softmax.cu: attention softmax on scores [batch, heads, seq, seq] in place (scores already scaled).
// alibi_heads > 0: ALiBi first (score -= slope |i - j|, head h being global head alibi_first_head + h).
// document_ids: i32 [batch, seq] or null; row i keeps only the keys of its own document.
void attention_softmax_forward(DType t, void* scores_to_probs, const uint8_t* key_padding_mask, int64_t batch,
                               int64_t heads, int64_t seq, bool causal, cudaStream_t s, int64_t alibi_heads = 0,
                               int64_t alibi_first_head = 0, const int32_t* document_ids = nullptr);
// For one head: dweights [batch, seq, seq] (scratch, contiguous) becomes dscores in place, given probs
// [batch, heads, seq, seq] of that head; attention dropout redrawn with index = flat probs index.
void attention_softmax_backward(DType t, void* dweights_to_dscores, const void* probs, int64_t batch, int64_t heads,
                                int64_t head, int64_t seq, float scale, const DropoutArgs& d, cudaStream_t s);
// For one head: dropped[b, i, j] = dropout(probs[b, head, i, j]) into a contiguous [batch, seq, seq] buffer.
void attention_probs_dropout(DType t, const void* probs, int64_t batch, int64_t heads, int64_t head, int64_t seq,
                             const DropoutArgs& d, void* dropped, cudaStream_t s);

// --- cross_entropy.cu: logits [n, vocab] of t; losses, lse of t (or f32 for loss_t).
void cross_entropy_forward(DType t, const void* logits, const int32_t* targets, int64_t n, int64_t vocab,
                           int64_t valid_vocab, DType loss_t, void* losses, void* log_sum_exp, cudaStream_t s);
void cross_entropy_backward(DType t, const void* logits, const int32_t* targets, DType loss_t, const void* log_sum_exp,
                            const void* dlosses, int64_t n, int64_t vocab, int64_t valid_vocab, void* dlogits,
                            cudaStream_t s);
// Forward and backward in one pass (a row read once, its gradient written once; dlogits may be
// logits), where cross_entropy_fused_supported: bf16 / f16, 16-byte aligned rows of <= 102,400 columns.
bool cross_entropy_fused_supported(DType t, const void* logits, const void* dlogits, int64_t vocab);
void cross_entropy_fused(DType t, const void* logits, const int32_t* targets, DType loss_t, const void* dlosses,
                         int64_t n, int64_t vocab, int64_t valid_vocab, void* losses, void* log_sum_exp, void* dlogits,
                         cudaStream_t s);

// --- embedding.cu (vocabulary-parallel): table rows are ids [first_id, first_id + vocab); other ids
// give `outside` rows (0 for the TP partial lookup) in forward and are skipped in backward.
void vocab_parallel_embedding_forward(DType t, const int32_t* ids, int64_t n, const void* table, int64_t first_id,
                                      int64_t vocab, int64_t hidden, void* out, cudaStream_t s, float outside = 0.0f);
void vocab_parallel_embedding_backward(DType t, const int32_t* ids, int64_t n, const void* dout, int64_t first_id,
                                       int64_t vocab, int64_t hidden, DType g, void* dtable, cudaStream_t s,
                                       void* det_scratch = nullptr);

// --- skinny_linear.cu: out[rows, n_out] = in[rows, k_in] weight[n_out, k_in]^T (+ bias[n_out]) for a few
// rows (decode), bf16/f16, fp32 accumulation; skinny_linear_applies says when it takes the shape.
constexpr int64_t kSkinnyMaxRows = 8;
bool skinny_linear_applies(DType t, int64_t rows, int64_t k_in, const void* in, const void* weight);
void skinny_linear_forward(DType t, const void* in, const void* weight, const void* bias, int64_t rows, int64_t n_out,
                           int64_t k_in, void* out, cudaStream_t s);

// --- bias_rows.cu: out[r, c] += bias[c] (same dtype t).
void add_bias_rows(DType t, void* out, const void* bias, int64_t rows, int64_t cols, cudaStream_t s);

// --- loss.cu
// *total (device double) += sum over i with mask[i] != 0 of mask[i] * values[i] (values, mask of loss_t).
void masked_sum(DType loss_t, const void* values, const void* mask, int64_t n, double* total, cudaStream_t s,
                double* partials = nullptr);
// Vocabulary-parallel cross entropy on this rank's columns [vocab_start, vocab_start + valid) of the
// real vocabulary (logits [n, vocab] of t, columns >= valid are padding): row maxima, then (after the
// max all-reduce) sums[2 row] = target logit - max (0 when the target is elsewhere) and
// sums[2 row + 1] = sum exp(logit - max), then (after the sum all-reduce) losses and lse.
void vocab_parallel_row_max(DType t, const void* logits, int64_t n, int64_t vocab, int64_t valid, float* row_max,
                            cudaStream_t s);
void vocab_parallel_sums(DType t, const void* logits, const int32_t* targets, int64_t n, int64_t vocab, int64_t valid,
                         int64_t vocab_start, const float* row_max, float* sums, cudaStream_t s);
void vocab_parallel_finish(const float* row_max, const float* sums, int64_t n, DType loss_t, void* losses,
                           void* log_sum_exp, cudaStream_t s);
void vocab_parallel_backward(DType t, const void* logits, const int32_t* targets, DType loss_t,
                             const void* log_sum_exp, const void* dlosses, int64_t n, int64_t vocab, int64_t valid,
                             int64_t vocab_start, void* dlogits, cudaStream_t s);

// --- rmsnorm.cu: y = x * rstd * weight, rstd = rsqrt(mean(x^2) + eps) of dtype stat_t (t or f32);
// weight of dtype t; dweight of g (f32 main grad or t), accumulated (+=).
void rmsnorm_forward(DType t, const void* in, const void* weight, double eps, int64_t rows, int64_t hidden, void* out,
                     DType stat_t, void* rstd, cudaStream_t s);
// scratch: rmsnorm_backward_scratch_floats(rows, hidden, deterministic) floats of device memory.
int64_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t hidden, bool deterministic);
void rmsnorm_backward(DType t, const void* dout, const void* in, const void* weight, DType stat_t, const void* rstd,
                      int64_t rows, int64_t hidden, void* din, DType g, void* dweight, float* scratch, cudaStream_t s,
                      bool deterministic = false);

// --- rope.cu: rotary embedding in place on rows [seq, batch, row_width]; in each row, `groups` groups
// (group_stride elements apart) of `heads` consecutive head vectors of head_dim (even) from `offset`.
// Pair (i, i + head_dim/2) rotates by position * theta^(-2i/head_dim) (fp32); inverse: by -angle.
struct RopeArgs {
  int64_t seq = 0, batch = 0, row_width = 0;
  int64_t offset = 0, heads = 0, head_dim = 0, groups = 1, group_stride = 0;
  int64_t rotary_dim = 0;    // rotated leading dims of each head vector (even, <= head_dim)
  bool interleaved = false;  // pairs (2i, 2i+1) instead of (i, i + rotary_dim/2)
  double theta = 10000.0;
  const int32_t* positions = nullptr;  // null: position = sequence index
  bool positions_per_batch = false;    // positions [batch, seq] instead of [seq]
  bool positions_per_row = false;      // positions [seq * batch], one per row
};
void rope_apply(DType t, void* rows, const RopeArgs& a, bool inverse, cudaStream_t s);

// --- bias_dropout_add.cu: out[i] = residual[i] + dropout(x[i] + bias[i % cols]) (bias nullable), the
// mask of dropout_apply with the same DropoutArgs; out may alias x or residual.
void bias_dropout_add(DType t, const void* x, const void* bias, const void* residual, int64_t n, int64_t cols,
                      const DropoutArgs& d, void* out, cudaStream_t s);

}  // namespace tessera::kernels
