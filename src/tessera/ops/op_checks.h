// Argument checks shared by the op dispatchers: device (CPU here; CUDA tensors fail until a kernel
// exists), float dtype, and shape helpers that treat [..., h] tensors as [rows, h] matrices.
#pragma once
#include <initializer_list>
#include <utility>

#include "tessera/core/tensor.h"

namespace tessera::ops::detail {

// Every defined tensor in `tensors` must live on the CPU; a CUDA tensor fails with
// "no CUDA kernel for <op> yet", a mix of devices fails naming both.
void require_cpu(const char* op, std::initializer_list<const Tensor*> tensors);
// True when the defined tensors live on CUDA (the dispatcher then calls the CUDA op, see
// cuda_dispatch.h), false when on the CPU; a mix of devices fails, as does CUDA in a CPU-only build.
bool runs_on_cuda(const char* op, std::initializer_list<const Tensor*> tensors);
// The CPU reference computes in f32 or f64 only.
void require_f32_or_f64(const char* op, const Tensor& t, const char* name);
void require_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name);
// Every tensor in `others` must have the dtype of `reference`.
void require_same_dtypes(const char* op, const Tensor& reference, const char* reference_name,
                         std::initializer_list<std::pair<const Tensor*, const char*>> others);
void require_dtype(const char* op, const Tensor& t, DType dtype, const char* name);
void require_same_shape(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name);
void require_defined(const char* op, const Tensor& t, const char* name);
// Number of rows when t ([..., cols]) is seen as [rows, cols]; checks ndim >= 1 and the last dim.
int64_t rows_with_last_dim(const char* op, const Tensor& t, int64_t cols, const char* name);
// Checks that t holds `count` elements and is either 1-D [count] or has exactly `leading_shape`.
void require_vector_like(const char* op, const Tensor& t, int64_t count, const Shape& leading_shape,
                         const char* name);

}  // namespace tessera::ops::detail

namespace tessera::ops::detail {

// Calls f(float{}) or f(double{}) by the dtype; any other dtype fails naming the op and tensor.
template <typename F>
void visit_f32_or_f64(const char* op, const Tensor& t, const char* name, F&& f) {
  require_f32_or_f64(op, t, name);
  if (t.dtype() == DType::f32) f(float{});
  else f(double{});
}

}  // namespace tessera::ops::detail
