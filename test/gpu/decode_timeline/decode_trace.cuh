// Block timeline recorder for the instrumented decode kernels (instrument.py): thread 0 of every
// block writes (entry, after the grid dependency wait, exit) %globaltimer stamps, the launch's
// number, a kernel tag and its SM into a device ring; at exit the host copies the ring to
// $DECODE_TIMELINE.<tag> (binary rows for analyze.py). Measurement only: never part of a build.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace decode_timeline {
namespace {  // one ring per translation unit (no relocatable device code)

struct Entry {
  unsigned long long entry, released, exit;
  unsigned launch, kind, block, sm;
};
constexpr unsigned kCapacity = 1u << 20;
__device__ Entry g_entries[kCapacity];
__device__ unsigned long long g_count;

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void record(unsigned launch, unsigned kind, unsigned long long entry,
                                       unsigned long long released) {
  if (threadIdx.x != 0) return;
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned long long i = atomicAdd(&g_count, 1ull) % kCapacity;
  g_entries[i] = Entry{entry, released, now(), launch, kind, blockIdx.x, sm};
}

const char*& tag() {
  static const char* value = "kernels";
  return value;
}

void dump() {
  const char* base = std::getenv("DECODE_TIMELINE");
  if (!base) return;
  unsigned long long n = 0;
  std::vector<Entry> ring(kCapacity);
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&n, g_count, sizeof(n)) != cudaSuccess ||
      cudaMemcpyFromSymbol(ring.data(), g_entries, sizeof(Entry) * kCapacity) != cudaSuccess) {
    std::fprintf(stderr, "decode_timeline: copying the ring failed\n");
    return;
  }
  char path[4096];
  std::snprintf(path, sizeof path, "%s.%s", base, tag());
  FILE* f = std::fopen(path, "wb");
  if (!f) {
    std::fprintf(stderr, "decode_timeline: cannot write %s\n", path);
    return;
  }
  const unsigned long long first = n > kCapacity ? n - kCapacity : 0;
  for (unsigned long long i = first; i < n; ++i) std::fwrite(&ring[i % kCapacity], sizeof(Entry), 1, f);
  std::fclose(f);
  std::fprintf(stderr, "decode_timeline: %llu blocks -> %s\n", n - first, path);
}

// The next launch's number (host side); the first call registers the dump at exit (after the CUDA
// runtime's own exit handler was registered, so it runs before that one).
unsigned next_launch(const char* kernel_tag) {
  static std::atomic<unsigned> counter{0};
  static const bool registered = (tag() = kernel_tag, std::atexit(dump) == 0);
  (void)registered;
  return counter++;
}

}  // namespace
}  // namespace decode_timeline
