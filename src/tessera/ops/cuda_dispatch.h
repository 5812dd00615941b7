// How a dispatcher hands CUDA tensors to the CUDA backend:
//   if (detail::runs_on_cuda(op, {&a, &b})) return TESSERA_CUDA_OP(name(a, b));
// In a CPU-only build TESSERA_CUDA_OP never runs (runs_on_cuda fails first) and names no CUDA code.
#pragma once
#include "tessera/ops/op_checks.h"

// An op that returns a value uses TESSERA_CUDA_VALUE (a throw has type void, which a value-returning
// function cannot return in a CPU-only build).
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/ops_cuda.h"
#define TESSERA_CUDA_OP(call) ::tessera::ops::cuda::call
#define TESSERA_CUDA_VALUE(call) ::tessera::ops::cuda::call
#else
#define TESSERA_CUDA_OP(call) TESSERA_FAIL("no CUDA kernel for ", op, ": this build has no CUDA backend")
#define TESSERA_CUDA_VALUE(call) (TESSERA_CUDA_OP(call), ::tessera::ops::detail::NoCudaValue{})
namespace tessera::ops::detail {
struct NoCudaValue {  // never constructed: the throw before it leaves first
  template <typename T>
  operator T() const { return T{}; }
};
}  // namespace tessera::ops::detail
#endif
