// One pre-LN GPT block: x + drop(attn(ln1(x))), then + drop(mlp(ln2(.))). Names follow Megatron
// core: input_layernorm, self_attention, pre_mlp_layernorm, mlp. Under sequence parallelism the
// block's input and output hold this rank's s*b/tp tokens and hidden dropout draws each element
// at its global index (the same masks as TP = 1); without SP the hidden state is replicated and
// every TP rank draws the same masks.
#pragma once
#include <memory>
#include <string>

#include "tessera/nn/norm.h"
#include "tessera/nn/mlp.h"
#include "tessera/nn/moe_layer.h"
#include "tessera/nn/self_attention.h"

namespace tessera::nn {

struct TransformerLayerShape {
  AttentionShape attention;
  int64_t ffn_hidden_size;
  double hidden_dropout, layernorm_epsilon, init_std, output_init_std;
  NormKind norm = NormKind::layernorm;  // input_layernorm and pre_mlp_layernorm (RMSNorm keeps the names)
  MlpOptions mlp = {};
  // num_experts > 0: the MLP is a mixture of experts (nn/moe_layer.h; its FFNs take `mlp`'s options).
  MoeShape moe = {};
};

class TransformerLayer {
 public:
  struct Saved {
    Norm::Saved ln1, ln2;
    SelfAttention::Saved attention;
    MLP::Saved mlp;
    MoeLayer::Saved moe;  // a MoE layer's
  };
  TransformerLayer(ParameterStore& store, const std::string& name, const TransformerLayerShape& shape,
                   const parallel::TensorParallel& tp = {}, const ExpertParallel& ep = {});
  // positions: i32 [s*b] position ids (RoPE; undefined: 0..s-1), kept alive until backward.
  // document_ids: i32 [b, s] or undefined: the attention's document masks (SelfAttention::forward).
  // scratch (nn/forward_scratch.h): where the buffers the backward does not read go (the output
  // projections' results before the residual adds; with drop_recomputable, selective recomputation,
  // the core attention's probabilities and the MLP's activation output, which backward recomputes).
  Tensor forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch, const Tensor& key_padding_mask,
                 const DropoutContext& dropout, Saved& saved, const Tensor& positions = Tensor(),
                 const Tensor& document_ids = Tensor(), const ForwardScratch& scratch = {}) const;
  // aux_loss_scale (MoE layers): the weight of this micro-batch's router losses in the objective.
  Tensor backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch, const DropoutContext& dropout,
                  const Saved& saved, double aux_loss_scale = 0.0) const;
  // Generation: t new tokens per sequence through the block, attention over the KV cache
  // (SelfAttention::forward_cached); no dropout, nothing saved.
  Tensor forward_cached(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch, const Tensor& key_mask,
                        const KvCacheSlot& cache, int64_t past, const Tensor& positions = Tensor()) const;
  int64_t kv_width() const { return attention_.kv_width(); }
  const MoeLayer* moe() const { return moe_.get(); }  // null on a dense layer

 private:
  // forward_cached as four fused decode linears around the cached attention (ops/decode_linear.h):
  // [LN1 + QKV], attention, [proj + residual], [LN2 + fc1 + GeLU], [fc2 + residual]. Undefined when
  // the block is not one it takes: a CUDA step of bf16/f16 with at most kSkinnyMaxRows rows, LayerNorm,
  // a dense GeLU MLP, TP = 1 (and TESSERA_DECODE_FUSION not 0).
  Tensor forward_cached_fused(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch, const Tensor& key_mask,
                              const KvCacheSlot& cache, int64_t past, const Tensor& positions) const;
  std::string name_;
  double hidden_dropout_;
  parallel::TensorParallel tp_;
  Norm ln1_;
  SelfAttention attention_;
  Norm ln2_;
  std::unique_ptr<MLP> mlp_;       // a dense layer's MLP
  std::unique_ptr<MoeLayer> moe_;  // or a MoE layer's
};

}  // namespace tessera::nn
