// The mixture-of-experts MLP (Megatron-Core's MoELayer: TopKRouter + token dispatcher +
// SequentialMLP experts + optional shared expert), CPU fp32, or CUDA (f32 / bf16 / f16, EP = 1:
// moe_layer_device.cpp). For the tokens x [n, h]:
//   logits = x W_r^T (router.weight [E, h], replicated), top-k routing (ops/moe_router.h), optional
//   capacity dropping and padding (ops/moe_capacity.h), the tokens permuted by expert
//   (ops/moe_permute.h), each expert's FFN (an nn::MLP: GeLU or SwiGLU, split over TP like the dense
//   MLP) on its rows, the outputs combined with the routing weights, plus the shared expert's FFN
//   of every token when there is one.
// The load-balancing and z-losses (ops/moe_aux_loss.h) are computed in forward (kept in Saved for
// the logs); backward adds their gradients, scaled by the coefficients and by aux_loss_scale (the
// weight of this micro-batch's layer losses in the step's objective), to the router's.
// Under sequence parallelism the input and output hold this rank's s*b/tp tokens; the layer works
// on the gathered s*b tokens (the same routing, losses and loads as without SP).
// Parameter names: <name>.router.weight, <name>.experts.<e>.linear_fc1/2.*, <name>.shared_experts.*
// (e: the global expert index); expert parameters reduce over the expert-data group.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/mlp.h"
#include "tessera/ops/moe_permute.h"
#include "tessera/ops/moe_router.h"

namespace tessera::nn {

// Expert parallelism: the expert_model group; rank r holds experts [r E / size, (r + 1) E / size).
// Tokens travel to their expert's rank and back by all-to-all (counts first, then the rows).
struct ExpertParallel {
  Communicator* comm = nullptr;  // null when size == 1
  int size = 1;
  int rank = 0;
};

struct MoeShape {
  int64_t num_experts = 0;
  int64_t expert_ffn_hidden_size = 0;
  int64_t shared_ffn_hidden_size = 0;  // 0: no shared expert
  ops::RouterOptions router;
  bool aux_loss = true;  // moe_router_load_balancing_type = aux_loss (else none: no gradient)
  double aux_loss_coeff = 0.0, z_loss_coeff = 0.0;
  double capacity_factor = 0.0;  // 0: dropless
  bool pad_to_capacity = false;
};

class MoeLayer {
 public:
  struct Saved {
    Tensor in, logits;  // [n, h], f32 [n, E]
    ops::Routing routing;
    ops::Permutation permutation;
    std::vector<int64_t> routed;  // slots per expert before dropping (the aux loss's counts)
    std::vector<MLP::Saved> experts;  // this rank's experts
    Tensor expert_out;  // [rows, h] in permutation order (every expert's rows, back from their ranks)
    // Expert parallelism: rows_per_expert of every EP rank [size][E], and the local experts' rows
    // as they ran, [local expert][source rank] ([rows, h]).
    std::vector<std::vector<int64_t>> ep_rows;
    int64_t local_rows = 0;
    MLP::Saved shared;
    // The device path (moe_layer_device.cpp): the routing and permutation as device index tensors
    // (ops/moe_device.h) and the f32 logits on the host (the aux / z losses run there).
    Tensor experts_dev, probs_dev, row_slot_dev, slot_row_dev;
    Tensor grouped_in, grouped_fc1, grouped_activation;  // the grouped-GEMM experts' activations
    std::vector<float> logits_host;
    double aux_loss = 0, z_loss = 0;  // without coefficients
    int64_t dropped = 0;              // slots dropped over capacity
    // The router statistics above (routed, aux_loss, z_loss, dropped) of another Saved, without its
    // activations (a fully recomputed layer's: nn/recompute.h).
    void keep_statistics_of(const Saved& other) {
      routed = other.routed;
      aux_loss = other.aux_loss;
      z_loss = other.z_loss;
      dropped = other.dropped;
    }
  };
  MoeLayer(ParameterStore& store, const std::string& name, int64_t hidden, const MoeShape& shape, double init_std,
           double output_init_std, const parallel::TensorParallel& tp, const MlpOptions& mlp,
           const ExpertParallel& ep = {});
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved) const;
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved, double aux_loss_scale) const;
  const MoeShape& shape() const { return shape_; }

 private:
  // rows [T_e, h] of the permutation -> the experts' outputs (forward) or input gradients (backward),
  // the same order; with EP the rows travel to their experts' ranks and back.
  Tensor run_experts(Arena& arena, const Tensor& rows, Saved& saved, bool backward) const;
  // forward / backward for CUDA tensors (f32, bf16, f16; EP = 1): nn/moe_layer_device.cpp.
  Tensor forward_device(Arena& arena, const Tensor& in, Saved& saved) const;
  Tensor backward_device(Arena& arena, const Tensor& dout, const Saved& saved, double aux_loss_scale) const;
  // run_experts with every local expert's FFN as grouped GEMMs (ops/moe_device.h), on CUDA at TP = 1
  // when TESSERA_MOE_GROUPED_GEMM=1: moe_layer_device.cpp.
  Tensor run_experts_grouped(Arena& arena, const Tensor& rows, Saved& saved, bool backward) const;

  std::string name_;
  MoeShape shape_;
  // Sequence parallelism: the layer all-gathers the TP group's tokens and routes all of them (its
  // experts split over TP as without SP), then keeps this rank's rows of the output.
  parallel::TensorParallel tp_;
  ParameterStore* store_;
  int router_ = -1;
  ExpertParallel ep_;
  int64_t first_expert_ = 0;  // global index of experts_[0]
  std::vector<MLP> experts_;
  std::unique_ptr<MLP> shared_;
  MlpOptions mlp_;  // the experts' (run_experts_grouped mirrors nn::MLP with them)
};

}  // namespace tessera::nn
