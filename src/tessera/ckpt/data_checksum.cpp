#include "tessera/ckpt/data_checksum.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace {

constexpr uint64_t kPrime = 0x100000001b3ull, kBasis = 0xcbf29ce484222325ull;

// Eight named chains the compiler keeps in registers (an array round-trips through the stack and
// halves the rate); one word per lane per round.
void lane_rounds_scalar(uint64_t lane_io[8], const unsigned char* p, size_t rounds) {
  uint64_t l0 = lane_io[0], l1 = lane_io[1], l2 = lane_io[2], l3 = lane_io[3];
  uint64_t l4 = lane_io[4], l5 = lane_io[5], l6 = lane_io[6], l7 = lane_io[7];
  auto word = [](const unsigned char* at) {
    uint64_t w;
    std::memcpy(&w, at, sizeof w);
    return w;
  };
  for (size_t i = 0; i < rounds; ++i) {
    const unsigned char* q = p + i * LaneChecksum::kStripe;
    l0 = (l0 ^ word(q)) * kPrime;
    l1 = (l1 ^ word(q + 8)) * kPrime;
    l2 = (l2 ^ word(q + 16)) * kPrime;
    l3 = (l3 ^ word(q + 24)) * kPrime;
    l4 = (l4 ^ word(q + 32)) * kPrime;
    l5 = (l5 ^ word(q + 40)) * kPrime;
    l6 = (l6 ^ word(q + 48)) * kPrime;
    l7 = (l7 ^ word(q + 56)) * kPrime;
  }
  const uint64_t lanes[8] = {l0, l1, l2, l3, l4, l5, l6, l7};
  std::memcpy(lane_io, lanes, sizeof lanes);
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CHECKSUM_AVX512 1
// The eight lanes in one register: lane k takes the 8-byte word at offset 8k of each 64-byte stripe,
// as lane_rounds_scalar does (little-endian), so the values are identical.
__attribute__((target("avx512f,avx512dq"))) void lane_rounds_avx512(uint64_t lane_io[8], const unsigned char* p,
                                                                    size_t rounds) {
  __m512i lanes = _mm512_loadu_si512(lane_io);
  const __m512i prime = _mm512_set1_epi64(static_cast<long long>(kPrime));
  for (size_t i = 0; i < rounds; ++i)
    lanes = _mm512_mullo_epi64(_mm512_xor_si512(lanes, _mm512_loadu_si512(p + i * LaneChecksum::kStripe)), prime);
  _mm512_storeu_si512(lane_io, lanes);
}

// The same rounds, each stripe also stored to dst (64-byte aligned) with a streaming store.
__attribute__((target("avx512f,avx512dq"))) void lane_rounds_copy_avx512(uint64_t lane_io[8], const unsigned char* p,
                                                                         unsigned char* dst, size_t rounds) {
  __m512i lanes = _mm512_loadu_si512(lane_io);
  const __m512i prime = _mm512_set1_epi64(static_cast<long long>(kPrime));
  for (size_t i = 0; i < rounds; ++i) {
    const __m512i word = _mm512_loadu_si512(p + i * LaneChecksum::kStripe);
    lanes = _mm512_mullo_epi64(_mm512_xor_si512(lanes, word), prime);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i * LaneChecksum::kStripe), word);
  }
  _mm512_storeu_si512(lane_io, lanes);
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return yes;
}
#endif

void lane_rounds(uint64_t lane_io[8], const unsigned char* p, size_t rounds) {
#if defined(TESSERA_CHECKSUM_AVX512)
  if (has_avx512()) return lane_rounds_avx512(lane_io, p, rounds);
#endif
  lane_rounds_scalar(lane_io, p, rounds);
}

// A copy with streaming stores (SSE2), any alignment: the destination's lines are written without
// being read into cache first.
void stream_copy(unsigned char* dst, const unsigned char* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t at = head;
  for (; at + 64 <= n; at += 64)
    for (size_t k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + k)));
  std::memcpy(dst + at, src + at, n - at);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace

uint64_t data_checksum(const void* data, size_t bytes) {
  uint64_t hash = kBasis;
  const auto* p = static_cast<const unsigned char*>(data);
  size_t words = bytes / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    hash = (hash ^ word) * kPrime;
  }
  for (size_t i = 8 * words; i < bytes; ++i) hash = (hash ^ p[i]) * kPrime;
  return hash;
}

LaneChecksum::LaneChecksum() {
  for (uint64_t& lane : lane_) lane = kBasis;
}

void LaneChecksum::update(const void* data, size_t bytes) {
  TESSERA_CHECK(!has_tail_, "LaneChecksum::update after a piece that was not a multiple of ", kStripe, " bytes");
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t rounds = bytes / kStripe;
  lane_rounds(lane_, p, rounds);
  const size_t done = rounds * kStripe;
  bytes_ += bytes;
  if (done < bytes) {
    tail_ = data_checksum(p + done, bytes - done);  // fewer than kStripe bytes, at the very end
    has_tail_ = true;
  }
}

void LaneChecksum::update_copy(void* dst, const void* src, size_t bytes) {
  TESSERA_CHECK(!has_tail_, "LaneChecksum::update_copy after a piece that was not a multiple of ", kStripe, " bytes");
  const auto* p = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const size_t rounds = bytes / kStripe, done = rounds * kStripe;
#if defined(TESSERA_CHECKSUM_AVX512)
  if (has_avx512() && reinterpret_cast<uintptr_t>(d) % 64 == 0) {
    lane_rounds_copy_avx512(lane_, p, d, rounds);
  } else {
    lane_rounds(lane_, p, rounds);
    stream_copy(d, p, done);
  }
#else
  lane_rounds(lane_, p, rounds);
  stream_copy(d, p, done);
#endif
#if defined(__SSE2__)
  _mm_sfence();  // the streamed stores are ordered before anything that follows
#endif
  bytes_ += bytes;
  if (done < bytes) {
    std::memcpy(d + done, p + done, bytes - done);
    tail_ = data_checksum(p + done, bytes - done);
    has_tail_ = true;
  }
}

uint64_t LaneChecksum::finish() const {
  const uint64_t tail = has_tail_ ? tail_ : data_checksum(nullptr, 0);
  const uint64_t fold[kLanes + 2] = {lane_[0], lane_[1], lane_[2], lane_[3], lane_[4],
                                     lane_[5], lane_[6], lane_[7], tail,     static_cast<uint64_t>(bytes_)};
  return data_checksum(fold, sizeof fold);
}

uint64_t data_checksum_lanes(const void* data, size_t bytes) {
  LaneChecksum sum;
  sum.update(data, bytes);
  return sum.finish();
}

size_t checksum_blocks(size_t bytes) { return (bytes + kChecksumBlockBytes - 1) / kChecksumBlockBytes; }

uint64_t fold_block_checksums(const uint64_t* block_sums, size_t blocks, size_t bytes) {
  std::vector<uint64_t> words(block_sums, block_sums + blocks);
  words.push_back(static_cast<uint64_t>(bytes));
  return data_checksum(words.data(), words.size() * sizeof(uint64_t));
}

uint64_t data_checksum_blocks(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::vector<uint64_t> sums(checksum_blocks(bytes));
  for (size_t b = 0; b < sums.size(); ++b) {
    const size_t begin = b * kChecksumBlockBytes;
    sums[b] = data_checksum_lanes(p + begin, std::min(kChecksumBlockBytes, bytes - begin));
  }
  return fold_block_checksums(sums.data(), sums.size(), bytes);
}

}  // namespace tessera::ckpt
