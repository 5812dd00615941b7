#pragma once
// Checksums of a dataset's bytes (HDF5 does not checksum raw data).
//
// data_checksum: 64-bit FNV-1a over 8-byte words (the tail byte-wise), one multiply chain (about
// 5 GB/s); files written before "checksum8" carry it as attribute "checksum".
// LaneChecksum / data_checksum_lanes: the same over 8 interleaved lanes (word i goes to lane i % 8),
// the lane values then folded by FNV-1a with the tail and the byte count: eight independent chains
// run at memory speed. LaneChecksum takes the bytes in pieces (every piece but the last a multiple of
// 64 bytes), so a reader can checksum each chunk while it is still in cache. The lane rounds use one
// AVX-512 register (8 x 64-bit lanes, vpmullq) where the CPU has AVX-512F/DQ: the same values, about
// twice the rate of the eight scalar multiply chains.
// data_checksum_blocks (the "checksum8" attribute): data_checksum_lanes of each 1 MiB block (the last
// one shorter), then data_checksum over the block values and the byte count as 8-byte words. Blocks
// are independent, so several threads can read and verify one large tensor at once.
#include <cstddef>
#include <cstdint>

namespace tessera::ckpt {

uint64_t data_checksum(const void* data, size_t bytes);

class LaneChecksum {
 public:
  static constexpr size_t kLanes = 8;
  static constexpr size_t kStripe = 8 * kLanes;  // bytes per round: one word per lane

  LaneChecksum();
  void update(const void* data, size_t bytes);  // bytes % kStripe == 0 unless this is the last piece
  // update(src, bytes) and a copy of the bytes to dst in the same pass, with streaming (non-temporal)
  // stores: dst's lines are not read into cache first, and each byte is loaded once for both.
  // The stores are fenced before it returns. Same rule for bytes as update.
  void update_copy(void* dst, const void* src, size_t bytes);
  uint64_t finish() const;

 private:
  uint64_t lane_[kLanes];
  uint64_t tail_ = 0;
  size_t bytes_ = 0;
  bool has_tail_ = false;
};

uint64_t data_checksum_lanes(const void* data, size_t bytes);

constexpr size_t kChecksumBlockBytes = size_t{1} << 20;
size_t checksum_blocks(size_t bytes);  // blocks of kChecksumBlockBytes, the last one shorter
uint64_t fold_block_checksums(const uint64_t* block_sums, size_t blocks, size_t bytes);
uint64_t data_checksum_blocks(const void* data, size_t bytes);

}  // namespace tessera::ckpt
