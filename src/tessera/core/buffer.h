// Owned memory. Buffer: one aligned allocation on a device, zero-filled. Arena: a bump allocator
// handing out tensor views from a chain of buffers, reset between steps, with its peak recorded.
#pragma once
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device = Device::cpu());
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device device() const { return device_; }
  Tensor as_tensor(DType dtype, Shape shape, size_t byte_offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Arena {
 public:
  // Blocks of block_bytes (or the allocation's size when larger); first_block_bytes > block_bytes:
  // the first block's size instead (a caller that knows what a cycle holds, e.g. the trainer's
  // activation estimate, takes it in one block: no block tails abandoned).
  explicit Arena(size_t block_bytes = size_t(64) << 20, Device device = Device::cpu(), size_t first_block_bytes = 0);
  Tensor allocate(DType dtype, Shape shape);  // zero-filled on the CPU, uninitialised on a GPU
  size_t mark() const { return used_; }       // bytes handed out so far
  void reset();                               // every view handed out becomes invalid
  // reset(), and when more than one block is held, replaces them by one block of the most bytes a
  // cycle has used (peak_bytes, abandoned tails included), so later cycles of the same allocations
  // fit in it whole. Frees device memory (cudaFree synchronizes the device): call it between steps,
  // never while a CUDA graph is being captured.
  void consolidate();
  size_t peak_bytes() const { return peak_; }
  size_t used_bytes() const { return used_; }
  Device device() const { return device_; }

 private:
  size_t block_bytes_;
  Device device_;
  size_t first_block_bytes_;
  std::vector<Buffer> blocks_;
  size_t block_index_ = 0;
  size_t block_offset_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
};

// Device memory hooks: the CUDA backend provides them; on a CPU-only build they fail clearly.
void* device_allocate(size_t bytes, Device device);
void device_free(void* ptr, Device device);
void device_memset_zero(void* ptr, size_t bytes, Device device);
// The most device memory held through device_allocate at once so far (0 without CUDA).
size_t device_peak_allocated_bytes();

}  // namespace tessera
