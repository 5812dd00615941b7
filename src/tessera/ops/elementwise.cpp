// Elementwise helper dispatch: checks devices, dtypes and shapes, then runs the CPU reference
// (cpu/elementwise.h) for any float dtype (f32, f64, bf16, f16).
#include "tessera/ops/elementwise.h"

#include <cstring>

#include "tessera/core/buffer.h"
#include "tessera/ops/cpu/elementwise.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {

// Calls f(T{}) with the storage type of a float dtype; other dtypes fail naming the op.
template <typename F>
void visit_float(const char* op, const Tensor& t, const char* name, F&& f) {
  switch (t.dtype()) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::bf16: f(bf16{}); return;
    case DType::f16: f(f16{}); return;
    default: TESSERA_FAIL(op, ": ", name, " must be a float tensor (f32, f64, bf16, f16), got ", t.describe());
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* op = "add";
  if (detail::runs_on_cuda(op, {&a, &b, &out})) return TESSERA_CUDA_OP(add(a, b, out));
  detail::require_same_shape(op, a, "a", b, "b");
  detail::require_same_shape(op, a, "a", out, "out");
  detail::require_same_dtypes(op, a, "a", {{&b, "b"}, {&out, "out"}});
  visit_float(op, a, "a", [&](auto tag) {
    using T = decltype(tag);
    cpu::add<T>(a.data_as<T>(), b.data_as<T>(), a.numel(), out.data_as<T>());
  });
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  const char* op = "add_inplace";
  if (detail::runs_on_cuda(op, {&dst, &src})) return TESSERA_CUDA_OP(add_inplace(dst, src));
  detail::require_same_shape(op, dst, "dst", src, "src");
  detail::require_same_dtype(op, dst, "dst", src, "src");
  visit_float(op, dst, "dst", [&](auto tag) {
    using T = decltype(tag);
    cpu::add_inplace<T>(dst.data_as<T>(), src.data_as<T>(), dst.numel());
  });
}

void scale_inplace(const Tensor& dst, double factor) {
  const char* op = "scale_inplace";
  if (detail::runs_on_cuda(op, {&dst})) return TESSERA_CUDA_OP(scale_inplace(dst, factor));
  visit_float(op, dst, "dst", [&](auto tag) {
    using T = decltype(tag);
    cpu::scale_inplace<T>(dst.data_as<T>(), dst.numel(), factor);
  });
}

void fill(const Tensor& dst, double value) {
  const char* op = "fill";
  if (detail::runs_on_cuda(op, {&dst})) return TESSERA_CUDA_OP(fill(dst, value));
  switch (dst.dtype()) {
    case DType::i32: cpu::fill<int32_t>(dst.data_as<int32_t>(), dst.numel(), value); return;
    case DType::i64: cpu::fill<int64_t>(dst.data_as<int64_t>(), dst.numel(), value); return;
    case DType::u16: cpu::fill<uint16_t>(dst.data_as<uint16_t>(), dst.numel(), value); return;
    case DType::u8: cpu::fill<uint8_t>(dst.data_as<uint8_t>(), dst.numel(), value); return;
    default: break;
  }
  visit_float(op, dst, "dst", [&](auto tag) {
    using T = decltype(tag);
    cpu::fill<T>(dst.data_as<T>(), dst.numel(), value);
  });
}

double masked_sum(const Tensor& values, const Tensor& mask) { return masked_sum_deferred(values, mask).value(); }

DeferredSum masked_sum_deferred(const Tensor& values, const Tensor& mask) {
  const char* op = "masked_sum";
  detail::require_same_shape(op, values, "values", mask, "mask");
  detail::require_same_dtype(op, values, "values", mask, "mask");
  if (detail::runs_on_cuda(op, {&values, &mask})) return TESSERA_CUDA_VALUE(masked_sum_deferred(values, mask));
  // In double, element by element in order (the CPU reference).
  const int64_t n = values.numel();
  Buffer values64(static_cast<size_t>(n) * sizeof(double)), mask64(static_cast<size_t>(n) * sizeof(double));
  const Tensor v = values64.as_tensor(DType::f64, {n}), m = mask64.as_tensor(DType::f64, {n});
  copy(values.flat(), v);
  copy(mask.flat(), m);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    if (m.data_as<double>()[i] != 0.0) sum += m.data_as<double>()[i] * v.data_as<double>()[i];
  return sum;
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
#ifdef TESSERA_HAVE_CUDA
  ::tessera::ops::cuda::synchronize();
#else
  TESSERA_FAIL("synchronize: ", device.name(), " needs a CUDA build");
#endif
}

void copy(const Tensor& src, const Tensor& dst) {
  const char* op = "copy";
  if (src.device().is_cuda() || dst.device().is_cuda()) return TESSERA_CUDA_OP(copy(src, dst));  // also host <-> device
  detail::require_cpu(op, {&src, &dst});
  detail::require_same_shape(op, src, "src", dst, "dst");
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data() && src.nbytes() > 0) std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
  visit_float(op, src, "src (converting copy)", [&](auto src_tag) {
    using S = decltype(src_tag);
    visit_float(op, dst, "dst (converting copy)", [&](auto dst_tag) {
      using D = decltype(dst_tag);
      cpu::convert<S, D>(src.data_as<S>(), src.numel(), dst.data_as<D>());
    });
  });
}

double sum_of_squares(const Tensor& t) {
  const char* op = "sum_of_squares";
#ifdef TESSERA_HAVE_CUDA
  if (detail::runs_on_cuda(op, {&t})) return cuda::sum_of_squares(t);
#endif
  detail::require_cpu(op, {&t});
  double result = 0.0;
  visit_float(op, t, "t", [&](auto tag) {
    using T = decltype(tag);
    result = cpu::sum_of_squares<T>(t.data_as<T>(), t.numel());
  });
  return result;
}

}  // namespace tessera::ops
