// The CUDA side of device handling: counting visible GPUs, binding this rank's GPU, and the
// device memory hooks of core/buffer.h (cudaMalloc / cudaFree / cudaMemset). CUDA builds only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "tessera/core/buffer.h"
#include "tessera/core/cuda_check.h"

namespace tessera {

int cuda_visible_device_count() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  TESSERA_CUDA_CHECK(rc);
  return count;
}

void cuda_set_device(int index) { TESSERA_CUDA_CHECK(cudaSetDevice(index)); }

namespace {
// Bytes held through device_allocate, for the peak-memory report (one process, any thread).
struct DeviceMemoryCounter {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
  size_t current = 0, peak = 0;
};
DeviceMemoryCounter& counter() {
  static DeviceMemoryCounter c;
  return c;
}

void require_cuda(Device device, const char* what) {
  TESSERA_CHECK(device.is_cuda(), what, " called for ", device.name(), ", which is not a CUDA device");
}
}  // namespace

void* device_allocate(size_t bytes, Device device) {
  require_cuda(device, "device_allocate");
  TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  void* ptr = nullptr;
  cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    TESSERA_FAIL("out of GPU memory on ", device.name(), " allocating ", bytes, " bytes");
  }
  TESSERA_CUDA_CHECK(rc);
  DeviceMemoryCounter& c = counter();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.sizes[ptr] = bytes;
  c.current += bytes;
  c.peak = std::max(c.peak, c.current);
  return ptr;
}

size_t device_peak_allocated_bytes() {
  DeviceMemoryCounter& c = counter();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.peak;
}

void device_free(void* ptr, Device device) {
  if (!ptr) return;
  {
    DeviceMemoryCounter& c = counter();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.sizes.find(ptr);
    if (it != c.sizes.end()) {
      c.current -= it->second;
      c.sizes.erase(it);
    }
  }
  // Called from destructors: report but never throw.
  cudaError_t rc = cudaFree(ptr);
  if (rc != cudaSuccess && rc != cudaErrorCudartUnloading)
    std::fprintf(stderr, "warning: cudaFree on %s failed: %s\n", device.name().c_str(), cudaGetErrorString(rc));
}

void device_memset_zero(void* ptr, size_t bytes, Device device) {
  require_cuda(device, "device_memset_zero");
  if (bytes == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  TESSERA_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}

}  // namespace tessera
