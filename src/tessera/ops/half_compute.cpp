#include "tessera/ops/half_compute.h"

#include "tessera/core/buffer.h"
#include "tessera/ops/elementwise.h"

namespace tessera::ops::detail {

bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

void compute_in_f32(const std::vector<Tensor>& tensors, const std::vector<bool>& is_output,
                    const std::function<void(const std::vector<Tensor>&)>& fn) {
  TESSERA_CHECK(tensors.size() == is_output.size(), "compute_in_f32: ", tensors.size(), " tensors but ",
                is_output.size(), " output flags");
  std::vector<Buffer> storage;
  storage.reserve(tensors.size());
  std::vector<Tensor> f32(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || !is_half(t.dtype())) {
      f32[i] = t;
      continue;
    }
    storage.emplace_back(static_cast<size_t>(t.numel()) * sizeof(float), t.device());
    f32[i] = storage.back().as_tensor(DType::f32, t.shape());
    copy(t, f32[i]);
  }
  fn(f32);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (is_output[i] && tensors[i].defined() && is_half(tensors[i].dtype())) copy(f32[i], tensors[i]);
}

}  // namespace tessera::ops::detail
