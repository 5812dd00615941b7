#include "tessera/runtime/device_copy.h"

#include <cstring>

#include "tessera/core/error.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/compute_stream.h"
#endif

namespace tessera {

void copy_synchronous(const Tensor& src, const Tensor& dst) {
  TESSERA_CHECK(src.dtype() == dst.dtype() && src.shape() == dst.shape(), "copy_synchronous: ", src.describe(),
                " -> ", dst.describe(), " must have one dtype and shape");
  if (src.nbytes() == 0 || src.data() == dst.data()) return;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  const cudaMemcpyKind kind = src.device().is_cuda()
                                  ? (dst.device().is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                  : cudaMemcpyHostToDevice;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), kind, compute_stream()));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
#else
  TESSERA_FAIL("copy_synchronous: ", src.describe(), " -> ", dst.describe(), " needs a CUDA build");
#endif
}

}  // namespace tessera
