// CUDA host side of the fused decode MLP (kernels/decode_mlp.cu): the kernel's arguments from the
// dispatcher's (ops/decode_mlp.cpp) checked tensors, launched on CudaContext's stream.
#include <algorithm>
#include <cstdlib>

#include "kernels/decode_mlp.h"
#include "kernels/kernels.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/decode_mlp.h"

namespace tessera::ops::cuda {

namespace {
// TESSERA_DECODE_MLP_BLOCKS_PER_SM (for measurements): kernels::DecodeMlpArgs::blocks_per_sm; unset: -1.
int blocks_per_sm() {
  static const int value = [] {
    const char* v = std::getenv("TESSERA_DECODE_MLP_BLOCKS_PER_SM");
    return v && *v ? std::atoi(v) : -1;
  }();
  return value;
}

bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }

kernels::DecodeMlpArgs args(const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  kernels::DecodeMlpArgs a;
  a.in = h.data();
  a.ln_weight = m.ln_weight.data();
  a.ln_bias = m.ln_bias.data();
  a.ln_eps = static_cast<float>(m.ln_eps);
  a.fc1_weight = m.fc1_weight.data();
  a.fc1_bias = present(m.fc1_bias) ? m.fc1_bias.data() : nullptr;
  a.fc2_weight_t = m.state->fc2_weight_t().data();
  a.fc2_bias = present(m.fc2_bias) ? m.fc2_bias.data() : nullptr;
  a.gelu = m.gelu_erf ? kernels::DecodeGelu::erf : kernels::DecodeGelu::tanh;
  a.workspace = m.state->workspace().data();
  a.workspace_bytes = static_cast<size_t>(m.state->workspace().numel());
  a.out = out.data();
  a.rows = h.dim(0);
  a.hidden = h.dim(1);
  a.ffn = m.fc1_weight.dim(0);
  a.programmatic = decode_programmatic_launch();
  a.blocks_per_sm = blocks_per_sm();
  a.shared_fc2 = std::getenv("TESSERA_DECODE_MLP_SMEM") && std::atoi(std::getenv("TESSERA_DECODE_MLP_SMEM")) == 1;
  return a;
}
}  // namespace

size_t decode_mlp_workspace_bytes(DType t, int64_t hidden, int64_t ffn) {
  size_t most = 0;
  for (int64_t rows = 1; rows <= kernels::kSkinnyMaxRows; ++rows)
    most = std::max(most, kernels::decode_mlp_workspace_bytes(t, rows, hidden, ffn));
  return most;
}

bool decode_mlp_fuses(const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  for (const Tensor* t : {&m.ln_weight, &m.ln_bias, &m.fc1_weight, &m.fc1_bias, &m.fc2_bias, &m.state->fc2_weight_t(), &out})
    if (present(*t) && t->dtype() != h.dtype()) return false;
  return kernels::decode_mlp_applies(h.dtype(), args(h, m, out));
}

void decode_mlp_forward(const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  kernels::decode_mlp_forward(h.dtype(), args(h, m, out), CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
