#include "tessera/ckpt/h5_verified_read.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tessera::ckpt {

namespace {

constexpr size_t kChunk = size_t{256} << 10;  // stays in L2: checksummed before it is evicted

// The file offset of a contiguous, allocated dataset stored in dtype's native type, or -1.
int64_t direct_offset(hid_t dataset, DType dtype, size_t bytes) {
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

int file_descriptor(hid_t file) {
  int* handle = nullptr;
  TESSERA_H5_CHECK(H5Fget_vfd_handle(file, H5P_DEFAULT, reinterpret_cast<void**>(&handle)), "file handle");
  TESSERA_CHECK(handle != nullptr, "HDF5 gave no file handle");
  return *handle;  // the default (sec2) driver's handle is a POSIX file descriptor
}

}  // namespace

void h5_read_verified(hid_t file, hid_t dataset, DType dtype, void* out, size_t bytes) {
  const int64_t offset = h5_has_attr(dataset, "checksum8") ? direct_offset(dataset, dtype, bytes) : -1;
  if (offset < 0) {
    h5_read_into(dataset, dtype, out);
    h5_verify_checksum(dataset, out, bytes);
    return;
  }
  const int fd = file_descriptor(file);
  auto* dst = static_cast<unsigned char*>(out);
  LaneChecksum sum;
  for (size_t done = 0; done < bytes;) {
    const size_t want = std::min(kChunk, bytes - done);
    size_t got = 0;
    while (got < want) {
      const ssize_t n = ::pread(fd, dst + done + got, want - got, static_cast<off_t>(offset + done + got));
      if (n < 0 && errno == EINTR) continue;
      TESSERA_CHECK(n > 0, "reading ", want - got, " bytes at offset ", offset + done + got, ": ",
                    n == 0 ? "end of file (truncated?)" : std::strerror(errno));
      got += static_cast<size_t>(n);
    }
    sum.update(dst + done, want);
    done += want;
  }
  const uint64_t stored = static_cast<uint64_t>(h5_attr_int(dataset, "checksum8"));
  const uint64_t actual = sum.finish();
  if (stored != actual)
    TESSERA_FAIL("the data does not match its checksum (stored ", stored, ", computed ", actual,
                 "): the file was modified or damaged after it was written");
}

}  // namespace tessera::ckpt
