// Argument checks shared by the op dispatchers (see op_checks.h).
#include "tessera/ops/op_checks.h"

namespace tessera::ops::detail {

void require_cpu(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined() || t->data() == nullptr) continue;
    if (t->device().is_cuda())
      TESSERA_FAIL("no CUDA kernel for ", op, ": this build has no CUDA backend (got ", t->describe(), ")");
    if (first && !(first->device() == t->device()))
      TESSERA_FAIL(op, ": tensors on different devices: ", first->describe(), " and ", t->describe());
    if (!first) first = t;
  }
}

bool runs_on_cuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined() || t->data() == nullptr) continue;
    if (first && !(first->device() == t->device()))
      TESSERA_FAIL(op, ": tensors on different devices: ", first->describe(), " and ", t->describe());
    if (!first) first = t;
  }
  if (!first || first->device().is_cpu()) return false;
#ifndef TESSERA_HAVE_CUDA
  TESSERA_FAIL("no CUDA kernel for ", op, ": this build has no CUDA backend (got ", first->describe(), ")");
#endif
  return true;
}

void require_f32_or_f64(const char* op, const Tensor& t, const char* name) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    TESSERA_FAIL(op, ": ", name, " must be f32 or f64 on the CPU, got ", t.describe());
}

void require_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  if (a.dtype() != b.dtype())
    TESSERA_FAIL(op, ": ", b_name, " must have the dtype of ", a_name, " (", dtype_name(a.dtype()), "), got ",
                 b.describe());
}

void require_same_dtypes(const char* op, const Tensor& reference, const char* reference_name,
                         std::initializer_list<std::pair<const Tensor*, const char*>> others) {
  for (const auto& [t, name] : others) require_same_dtype(op, reference, reference_name, *t, name);
}

void require_dtype(const char* op, const Tensor& t, DType dtype, const char* name) {
  if (t.dtype() != dtype) TESSERA_FAIL(op, ": ", name, " must be ", dtype_name(dtype), ", got ", t.describe());
}

void require_same_shape(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  if (a.shape() != b.shape())
    TESSERA_FAIL(op, ": ", b_name, " must have the shape of ", a_name, " ", shape_string(a.shape()), ", got ",
                 b.describe());
}

void require_defined(const char* op, const Tensor& t, const char* name) {
  if (!t.defined()) TESSERA_FAIL(op, ": ", name, " is an undefined tensor");
}

int64_t rows_with_last_dim(const char* op, const Tensor& t, int64_t cols, const char* name) {
  if (t.ndim() < 1 || t.dim(-1) != cols)
    TESSERA_FAIL(op, ": ", name, " must be [..., ", cols, "], got ", t.describe());
  return cols ? t.numel() / cols : 0;
}

void require_vector_like(const char* op, const Tensor& t, int64_t count, const Shape& leading_shape,
                         const char* name) {
  bool ok = (t.ndim() == 1 && t.dim(0) == count) || t.shape() == leading_shape;
  if (!ok)
    TESSERA_FAIL(op, ": ", name, " must be [", count, "] or ", shape_string(leading_shape), ", got ", t.describe());
}

}  // namespace tessera::ops::detail
