// Deterministic counter-based RNG (Philox4x32-10). A value is a pure function of (seed, stream,
// index), so any rank can draw element i of a global tensor or mask without drawing the others:
// initialisation, dropout and mock data give the same numbers whatever the parallel layout.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace tessera {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_high, uint64_t counter_low);

// FNV-1a of a name, to derive stream ids from parameter names ("layers.3.mlp.fc1.weight").
uint64_t stream_id(std::string_view name);
// Combines stream ids (e.g. a dropout site with an iteration number).
uint64_t mix_stream(uint64_t a, uint64_t b);

class RandomStream {
 public:
  RandomStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t bits(uint64_t index) const;       // uniform 32-bit integer
  float uniform(uint64_t index) const;       // [0, 1) with 24 random bits
  double uniform_double(uint64_t index) const;
  float normal(uint64_t index) const;        // standard normal (Box-Muller on one Philox block)
  uint64_t below(uint64_t index, uint64_t n) const;  // uniform integer in [0, n)
  // [0, 1) with 24 random bits from word index % 4 of Philox block index / 4: four consecutive
  // indices share one Philox evaluation (the dropout masks: a GPU thread draws four decisions at once).
  float uniform_of_quarter(uint64_t index) const;
  uint64_t seed() const { return seed_; }      // the key (device kernels redraw the same values)
  uint64_t stream() const { return stream_; }  // the high counter word

 private:
  uint64_t seed_;
  uint64_t stream_;
};

}  // namespace tessera
