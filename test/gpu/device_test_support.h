// Shared pieces of the GPU parity tests: CUDA error checks, rounding host values to a storage dtype,
// device tensors with guard bytes on both sides (an out-of-bounds write shows as a damaged guard),
// and conversions between f32 host values and f32 / bf16 / f16 bytes.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/cuda/ops_cuda.h"

namespace tessera::gpu_test {

constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xA5;

inline void cuda_ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

inline float round_to(float v, DType t) {
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::f16) return f16_to_float(float_to_f16(v));
  return v;
}

// n normal values (mean, stddev), each rounded to dtype t.
inline std::vector<float> random_normal(std::mt19937& rng, int64_t n, float stddev, DType t, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_to(dist(rng), t);
  return v;
}

// A device tensor with kGuard guard bytes on each side; the guards must survive every op.
struct DeviceTensor {
  char* base = nullptr;
  size_t bytes = 0;
  Tensor tensor;
  DeviceTensor(DType t, Shape shape, const void* host_bytes) {
    bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(t);
    cuda_ok(cudaMalloc(&base, bytes + 2 * kGuard), "cudaMalloc");
    cuda_ok(cudaMemset(base, kGuardByte, bytes + 2 * kGuard), "cudaMemset");
    if (host_bytes && bytes) cuda_ok(cudaMemcpy(base + kGuard, host_bytes, bytes, cudaMemcpyHostToDevice), "upload");
    tensor = Tensor(base + kGuard, t, std::move(shape), Device::cuda(0));
  }
  ~DeviceTensor() { cudaFree(base); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  bool guards_intact() const {
    std::vector<unsigned char> g(kGuard);
    for (size_t offset : {size_t(0), kGuard + bytes}) {
      cuda_ok(cudaMemcpy(g.data(), base + offset, kGuard, cudaMemcpyDeviceToHost), "guard download");
      for (unsigned char c : g)
        if (c != kGuardByte) return false;
    }
    return true;
  }
};

// f32 host values as f32 / bf16 / f16 bytes, and back.
inline std::vector<unsigned char> to_bytes(const std::vector<float>& v, DType t) {
  std::vector<unsigned char> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) std::memcpy(&out[i * 4], &v[i], 4);
    else if (t == DType::bf16) { bf16 h = float_to_bf16(v[i]); std::memcpy(&out[i * 2], &h, 2); }
    else { f16 h = float_to_f16(v[i]); std::memcpy(&out[i * 2], &h, 2); }
  }
  return out;
}

// The device tensor's values as f32 after the queued ops finish; a damaged guard is a failure (counted).
inline std::vector<float> download_checked(const DeviceTensor& d, const std::string& what, int& failures) {
  ops::cuda::synchronize();
  cuda_ok(cudaGetLastError(), what.c_str());
  if (!d.guards_intact()) {
    std::printf("FAIL %s: guard bytes overwritten (out-of-bounds write)\n", what.c_str());
    ++failures;
  }
  const DType t = d.tensor.dtype();
  const int64_t n = d.tensor.numel();
  std::vector<unsigned char> raw(d.bytes);
  if (d.bytes) cuda_ok(cudaMemcpy(raw.data(), d.tensor.data(), d.bytes, cudaMemcpyDeviceToHost), "download");
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::f32) std::memcpy(&out[i], &raw[i * 4], 4);
    else if (t == DType::bf16) { bf16 h; std::memcpy(&h, &raw[i * 2], 2); out[i] = bf16_to_float(h); }
    else { f16 h; std::memcpy(&h, &raw[i * 2], 2); out[i] = f16_to_float(h); }
  }
  return out;
}

// max|gpu - ref| / max(max|ref|, scale_floor, 1e-6) over the finite elements, and how many
// elements disagree on NaN / Inf (ref rounded to output_dtype first, as the device stores it).
struct NormalisedError {
  double error = 0.0;
  int special_mismatches = 0;
};
inline NormalisedError normalised_error(const std::vector<float>& gpu, const std::vector<float>& ref,
                                        DType output_dtype, double scale_floor = 0.0) {
  double max_ref = scale_floor, max_err = 0.0;
  NormalisedError result;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = round_to(ref[i], output_dtype), g = gpu[i];
    if (!std::isfinite(r) || !std::isfinite(g)) {
      const bool same = (std::isnan(r) && std::isnan(g)) || (std::isinf(r) && std::isinf(g) && (r > 0) == (g > 0));
      if (!same) ++result.special_mismatches;
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
    max_err = std::max(max_err, std::fabs(double(g) - double(ref[i])));
  }
  result.error = max_err / std::max(max_ref, 1e-6);
  return result;
}

}  // namespace tessera::gpu_test
