#include "tessera/core/rng.h"

#include <cmath>

namespace tessera {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_high, uint64_t counter_low) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c[4] = {static_cast<uint32_t>(counter_low), static_cast<uint32_t>(counter_low >> 32),
                   static_cast<uint32_t>(counter_high), static_cast<uint32_t>(counter_high >> 32)};
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c[1] ^ k0, n1 = lo1, n2 = hi0 ^ c[3] ^ k1, n3 = lo0;
    c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c[0], c[1], c[2], c[3]};
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64-bit offset basis (0xcbf29ce484222325)
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t mix_stream(uint64_t a, uint64_t b) {
  auto r = philox4x32(a, 0x5453535241ull, b);  // "TESSRA"
  return static_cast<uint64_t>(r[0]) | static_cast<uint64_t>(r[1]) << 32;
}

uint32_t RandomStream::bits(uint64_t index) const { return philox4x32(seed_, stream_, index)[0]; }

float RandomStream::uniform(uint64_t index) const {
  return static_cast<float>(bits(index) >> 8) * (1.0f / 16777216.0f);
}

float RandomStream::uniform_of_quarter(uint64_t index) const {
  return static_cast<float>(philox4x32(seed_, stream_, index >> 2)[index & 3] >> 8) * (1.0f / 16777216.0f);
}

double RandomStream::uniform_double(uint64_t index) const {
  auto r = philox4x32(seed_, stream_, index);
  uint64_t v = (static_cast<uint64_t>(r[0]) << 32 | r[1]) >> 11;
  return static_cast<double>(v) * (1.0 / 9007199254740992.0);
}

float RandomStream::normal(uint64_t index) const {
  auto r = philox4x32(seed_, stream_, index);
  // u1 in (0, 1] so the log is finite; u2 in [0, 1).
  double u1 = (static_cast<double>(r[0]) + 1.0) * (1.0 / 4294967296.0);
  double u2 = static_cast<double>(r[1]) * (1.0 / 4294967296.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t RandomStream::below(uint64_t index, uint64_t n) const {
  auto r = philox4x32(seed_, stream_, index);
  uint64_t v = static_cast<uint64_t>(r[0]) << 32 | r[1];
  return n ? v % n : 0;
}

}  // namespace tessera
