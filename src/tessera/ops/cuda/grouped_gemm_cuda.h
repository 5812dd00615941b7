// Grouped linear layers for the MoE experts (ops/moe_device.h): one cublasGemmGroupedBatchedEx call
// runs every group's GEMM (group g: the contiguous row block of rows[g] rows, its own weight).
#pragma once
#include <cstdint>
#include <span>

#include "tessera/core/tensor.h"

namespace tessera::ops::cuda {

void grouped_linear_forward(const Tensor& in, std::span<const Tensor> weights, std::span<const Tensor> biases,
                            std::span<const int64_t> rows, const Tensor& out);
void grouped_linear_backward(const Tensor& dout, const Tensor& in, std::span<const Tensor> weights,
                             std::span<const int64_t> rows, const Tensor& din, std::span<const Tensor> dweights,
                             std::span<const Tensor> dbiases);

}  // namespace tessera::ops::cuda
