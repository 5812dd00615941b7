#include "tessera/core/buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tessera {

namespace {
constexpr size_t kAlignment = 256;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

#ifndef TESSERA_HAVE_CUDA
void* device_allocate(size_t, Device device) {
  TESSERA_FAIL("cannot allocate on ", device.name(), ": this Tessera was built without CUDA (-DTESSERA_CUDA=OFF)");
}
void device_free(void*, Device) {}
void device_memset_zero(void*, size_t, Device device) {
  TESSERA_FAIL("cannot use ", device.name(), ": this Tessera was built without CUDA");
}
size_t device_peak_allocated_bytes() { return 0; }
#endif

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    data_ = std::aligned_alloc(kAlignment, round_up(bytes, kAlignment));
    TESSERA_CHECK(data_ != nullptr, "out of host memory allocating ", bytes, " bytes");
    std::memset(data_, 0, bytes);
  } else {
    data_ = device_allocate(bytes, device);
    device_memset_zero(data_, bytes, device);
  }
}

Buffer::~Buffer() {
  if (!data_) return;
  if (device_.is_cpu()) std::free(data_);
  else device_free(data_, device_);
}

Buffer::Buffer(Buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    this->~Buffer();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

Tensor Buffer::as_tensor(DType dtype, Shape shape, size_t byte_offset) const {
  size_t need = byte_offset + static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  TESSERA_CHECK(need <= bytes_, "view of ", need, " bytes exceeds buffer of ", bytes_);
  return Tensor(static_cast<char*>(data_) + byte_offset, dtype, std::move(shape), device_);
}

Arena::Arena(size_t block_bytes, Device device, size_t first_block_bytes)
    : block_bytes_(block_bytes), device_(device), first_block_bytes_(std::max(block_bytes, first_block_bytes)) {}

Tensor Arena::allocate(DType dtype, Shape shape) {
  size_t bytes = round_up(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), kAlignment);
  while (true) {
    if (block_index_ == blocks_.size())
      blocks_.emplace_back(std::max(blocks_.empty() ? first_block_bytes_ : block_bytes_, bytes), device_);
    Buffer& block = blocks_[block_index_];
    if (block_offset_ + bytes <= block.size()) {
      Tensor t = block.as_tensor(dtype, std::move(shape), block_offset_);
      if (device_.is_cpu()) std::memset(t.data(), 0, t.nbytes());  // device ops write their outputs whole
      block_offset_ += bytes;
      used_ += bytes;
      peak_ = std::max(peak_, used_);
      return t;
    }
    // The rest of this block is abandoned until reset(); a later block must be large enough.
    used_ += block.size() - block_offset_;
    ++block_index_;
    block_offset_ = 0;
    if (block_index_ < blocks_.size() && blocks_[block_index_].size() < bytes)
      blocks_[block_index_] = Buffer(bytes, device_);
  }
}

void Arena::reset() {
  block_index_ = 0;
  block_offset_ = 0;
  used_ = 0;
}

void Arena::consolidate() {
  reset();
  if (blocks_.size() <= 1) return;
  blocks_.clear();  // frees before the one block is allocated: the device never holds both
  first_block_bytes_ = std::max(first_block_bytes_, peak_);
  blocks_.emplace_back(first_block_bytes_, device_);
}

}  // namespace tessera
