#include "tessera/ckpt/h5_verified_read.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "tessera/ckpt/block_workers.h"

namespace tessera::ckpt {

namespace {

constexpr size_t kChunk = size_t{256} << 10;        // stays in L2: checksummed before it is evicted
constexpr size_t kBlocksPerThread = 2;               // a smaller tensor is not worth a thread

}  // namespace

int64_t h5_direct_offset(hid_t dataset, DType dtype, size_t bytes) {
  if (bytes == 0) return -1;
  const haddr_t offset = H5Dget_offset(dataset);  // HADDR_UNDEF unless contiguous and allocated
  if (offset == HADDR_UNDEF) {
    h5_error_message();  // clears the error stack the failed query left
    return -1;
  }
  if (H5Dget_storage_size(dataset) != bytes) return -1;
  H5Id type(TESSERA_H5_CHECK(H5Dget_type(dataset), "dataset type"));
  if (TESSERA_H5_CHECK(H5Tequal(type.get(), h5_native_type(dtype)), "dataset type") <= 0) return -1;
  return static_cast<int64_t>(offset);
}

int h5_file_descriptor(hid_t file) {
  int* handle = nullptr;
  TESSERA_H5_CHECK(H5Fget_vfd_handle(file, H5P_DEFAULT, reinterpret_cast<void**>(&handle)), "file handle");
  TESSERA_CHECK(handle != nullptr, "HDF5 gave no file handle");
  return *handle;  // the default (sec2) driver's handle is a POSIX file descriptor
}

namespace {

void pread_fully(int fd, unsigned char* dst, size_t bytes, int64_t offset) {
  for (size_t got = 0; got < bytes;) {
    const ssize_t n = ::pread(fd, dst + got, bytes - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    TESSERA_CHECK(n > 0, "reading ", bytes - got, " bytes at offset ", offset + got, ": ",
                  n == 0 ? "end of file (truncated?)" : std::strerror(errno));
    got += static_cast<size_t>(n);
  }
}

// A reused, cache-hot buffer per thread: the kernel's copy out of the page cache lands in cache, and
// LaneChecksum::update_copy checksums it there and moves it to the destination with streaming stores
// in the same pass (a copy straight into memory not in cache moves each byte three times).
struct Bounce {
  alignas(64) unsigned char bytes[kChunk];
};

// Reads blocks [first, last) of the dataset into dst and stores each block's checksum.
void read_blocks(int fd, int64_t offset, unsigned char* dst, size_t bytes, size_t first, size_t last,
                 uint64_t* sums) {
  thread_local std::unique_ptr<Bounce> bounce;
  if (!bounce) bounce = std::make_unique<Bounce>();
  for (size_t b = first; b < last; ++b) {
    const size_t begin = b * kChecksumBlockBytes, end = std::min(bytes, begin + kChecksumBlockBytes);
    LaneChecksum sum;
    for (size_t at = begin; at < end; at += kChunk) {
      const size_t n = std::min(kChunk, end - at);
      pread_fully(fd, bounce->bytes, n, offset + static_cast<int64_t>(at));
      sum.update_copy(dst + at, bounce->bytes, n);
    }
    sums[b] = sum.finish();
  }
}

}  // namespace

void read_verified_at(int fd, int64_t offset, void* out, size_t bytes, uint64_t stored) {
  auto* dst = static_cast<unsigned char*>(out);
  const size_t blocks = checksum_blocks(bytes);
  std::vector<uint64_t> sums(blocks);
  const size_t threads = std::min(block_worker_count(blocks), std::max<size_t>(1, blocks / kBlocksPerThread));
  // Contiguous runs of blocks per thread (sequential reads); the calling thread takes the first.
  std::vector<std::exception_ptr> errors(threads);
  run_on_block_workers(threads, [&](size_t t) {
    try {
      read_blocks(fd, offset, dst, bytes, blocks * t / threads, blocks * (t + 1) / threads, sums.data());
    } catch (...) {
      errors[t] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  const uint64_t actual = fold_block_checksums(sums.data(), blocks, bytes);
  if (stored != actual)
    TESSERA_FAIL("the data does not match its checksum (stored ", stored, ", computed ", actual,
                 "): the file was modified or damaged after it was written");
}

void h5_read_verified(hid_t file, hid_t dataset, DType dtype, void* out, size_t bytes) {
  const int64_t offset = h5_has_attr(dataset, "checksum8") ? h5_direct_offset(dataset, dtype, bytes) : -1;
  if (offset < 0) {
    h5_read_into(dataset, dtype, out);
    h5_verify_checksum(dataset, out, bytes);
    return;
  }
  read_verified_at(h5_file_descriptor(file), offset, out, bytes,
                   static_cast<uint64_t>(h5_attr_int(dataset, "checksum8")));
}

}  // namespace tessera::ckpt
