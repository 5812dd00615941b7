#pragma once
// Reading a checkpoint dataset's bytes and checking them against the stored checksum in one pass.
// A contiguous dataset stored in the native element type (what h5_write_tensor writes) with a block
// checksum ("checksum8", data_checksum.h) is read straight from the file with pread in 256 KiB chunks
// into a reused per-thread buffer that stays in cache; LaneChecksum::update_copy then checksums each
// chunk and moves it to the destination with streaming stores in the same pass (one AVX-512 register
// per 64 bytes where the CPU has it). A large tensor's 1 MiB checksum blocks are shared over up to
// four threads (the cores there are), each reading a contiguous run: one core's page-cache copy into
// memory that is not in cache runs at about half of dd's rate into its small reused buffer. Anything
// else (older one-lane "checksum" files, other layouts) goes through H5Dread and h5_verify_checksum.
#include <cstddef>
#include <cstdint>

#include "tessera/ckpt/h5_file.h"

namespace tessera::ckpt {

// Reads the whole dataset (bytes = its element count x the element size of dtype) into out and
// fails when the bytes do not match the stored checksum.
void h5_read_verified(hid_t file, hid_t dataset, DType dtype, void* out, size_t bytes);

// The pieces of h5_read_verified's direct path, for a reader that looks up the offsets and checksums
// once (CheckpointReader's index) instead of per read:
// The file offset of a contiguous, allocated dataset of `bytes` bytes stored in dtype's native type
// (what pread can read as is), or -1.
int64_t h5_direct_offset(hid_t dataset, DType dtype, size_t bytes);
// The POSIX file descriptor of a file HDF5 opened with its default (sec2) driver.
int h5_file_descriptor(hid_t file);
// Reads `bytes` bytes at `offset` of fd into out and fails unless their block checksum
// (data_checksum_blocks) equals `stored` (the dataset's "checksum8").
void read_verified_at(int fd, int64_t offset, void* out, size_t bytes, uint64_t stored);

}  // namespace tessera::ckpt
