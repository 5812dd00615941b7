// Fused decode MLP dispatch: the CUDA kernel when it takes the tensors and the layer's state is
// prepared, else two fused decode linears.
#include "tessera/ops/decode_mlp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/elementwise.h"

namespace tessera::ops {

namespace {
void check(const char* op, const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  detail::require_defined(op, h, "h");
  detail::require_defined(op, m.fc1_weight, "fc1_weight");
  detail::require_defined(op, m.fc2_weight, "fc2_weight");
  detail::require_defined(op, m.ln_weight, "ln_weight");
  detail::require_defined(op, m.ln_bias, "ln_bias");
  detail::require_defined(op, out, "out");
  TESSERA_CHECK(h.ndim() == 2, op, ": h must be [rows, hidden], got ", h.describe());
  const int64_t hidden = h.dim(1), ffn = m.fc1_weight.dim(0);
  TESSERA_CHECK(m.fc1_weight.shape() == Shape({ffn, hidden}) && m.fc2_weight.shape() == Shape({hidden, ffn}), op,
                ": fc1_weight must be [ffn, ", hidden, "] and fc2_weight [", hidden, ", ffn], got ",
                m.fc1_weight.describe(), " and ", m.fc2_weight.describe());
  detail::require_same_shape(op, out, "out", h, "h");
  TESSERA_CHECK(out.data() != h.data(), op, ": out must not alias h");
  if (m.state && m.state->ready())
    TESSERA_CHECK(m.state->fc2_weight_t().shape() == Shape({ffn, hidden}), op, ": the prepared fc2_weight_t is ",
                  m.state->fc2_weight_t().describe(), ", expected [", ffn, ", ", hidden, "]");
}

// [hidden, ffn] -> [ffn, hidden] for 2-byte elements, in 32 x 32 tiles.
std::vector<uint16_t> transposed(const std::vector<uint16_t>& in, int64_t rows, int64_t cols) {
  std::vector<uint16_t> out(in.size());
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) out[c * rows + r] = in[r * cols + c];
  return out;
}
}  // namespace

size_t decode_mlp_workspace_bytes(DType t, int64_t hidden, int64_t ffn) {
  [[maybe_unused]] const char* op = "decode_mlp_workspace_bytes";  // the CPU-only build's message
  return TESSERA_CUDA_VALUE(decode_mlp_workspace_bytes(t, hidden, ffn));
}

DecodeMlpState::DecodeMlpState(const Tensor& fc2_weight, const Tensor& workspace) : workspace_(workspace) {
  const char* op = "DecodeMlpState";
  detail::require_defined(op, fc2_weight, "fc2_weight");
  detail::require_defined(op, workspace, "workspace");
  TESSERA_CHECK(fc2_weight.ndim() == 2 && fc2_weight.device().is_cuda() && dtype_size(fc2_weight.dtype()) == 2, op,
                ": fc2_weight must be a [hidden, ffn] bf16/f16 tensor on a CUDA device, got ", fc2_weight.describe());
  TESSERA_CHECK(workspace.device() == fc2_weight.device(), op, ": the workspace must be on ", fc2_weight.device().name(),
                ", got ", workspace.describe());
  const int64_t hidden = fc2_weight.dim(0), ffn = fc2_weight.dim(1);
  buffer_ = Buffer(static_cast<size_t>(hidden * ffn) * 2, fc2_weight.device());
  std::vector<uint16_t> host(static_cast<size_t>(hidden * ffn));
  copy(fc2_weight, Tensor(host.data(), fc2_weight.dtype(), fc2_weight.shape()));
  synchronize(fc2_weight.device());
  const std::vector<uint16_t> t = transposed(host, hidden, ffn);
  fc2_weight_t_ = buffer_.as_tensor(fc2_weight.dtype(), {ffn, hidden});
  copy(Tensor(const_cast<uint16_t*>(t.data()), fc2_weight.dtype(), {ffn, hidden}), fc2_weight_t_);
  synchronize(fc2_weight.device());
}

bool decode_mlp_fusion_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TESSERA_DECODE_MLP");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

bool decode_mlp_fuses(const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  if (!h.device().is_cuda() || !m.state || !m.state->ready() || !decode_mlp_fusion_enabled()) return false;
  const char* op = "decode_mlp_fuses";
  if (!detail::runs_on_cuda(op, {&h, &m.fc1_weight, &m.state->fc2_weight_t(), &out})) return false;
  return TESSERA_CUDA_VALUE(decode_mlp_fuses(h, m, out));
}

void decode_mlp_forward(Arena& arena, const Tensor& h, const DecodeMlp& m, const Tensor& out) {
  const char* op = "decode_mlp_forward";
  check(op, h, m, out);
  if (decode_mlp_fuses(h, m, out)) return TESSERA_CUDA_OP(decode_mlp_forward(h, m, out));
  // [LN + fc1 + GeLU], then [fc2 + residual].
  const DecodeLinear up{m.ln_weight, m.ln_bias, m.ln_eps, m.fc1_weight, m.fc1_bias,
                        m.gelu_erf ? DecodeEpilogue::gelu_erf : DecodeEpilogue::gelu_tanh, Tensor()};
  Tensor activation = arena.allocate(h.dtype(), {h.dim(0), m.fc1_weight.dim(0)});
  decode_linear_forward(arena, h, up, activation);
  const DecodeLinear down{Tensor(), Tensor(), 0.0, m.fc2_weight, m.fc2_bias, DecodeEpilogue::residual_add, h};
  decode_linear_forward(arena, activation, down, out);
}

}  // namespace tessera::ops
