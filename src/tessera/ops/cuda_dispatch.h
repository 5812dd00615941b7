// How a dispatcher hands CUDA tensors to the CUDA backend:
//   if (detail::runs_on_cuda(op, {&a, &b})) return TESSERA_CUDA_OP(name(a, b));
// In a CPU-only build TESSERA_CUDA_OP never runs (runs_on_cuda fails first) and names no CUDA code.
#pragma once
#include "tessera/ops/op_checks.h"

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/ops_cuda.h"
#define TESSERA_CUDA_OP(call) ::tessera::ops::cuda::call
#define TESSERA_CUDA_OP_VALUE(type, call) ::tessera::ops::cuda::call
#else
#define TESSERA_CUDA_OP(call) TESSERA_FAIL("no CUDA kernel for ", op, ": this build has no CUDA backend")
// For a dispatcher that returns a value (a throw expression alone has type void).
#define TESSERA_CUDA_OP_VALUE(type, call) (TESSERA_CUDA_OP(call), type{})
#endif
