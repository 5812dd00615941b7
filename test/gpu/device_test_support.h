// Shared pieces of the GPU parity tests: CUDA error checks, rounding host values to a storage dtype,
// device tensors with guard bytes on both sides (an out-of-bounds write shows as a damaged guard),
// conversions between f32 host values and f32 / bf16 / f16 bytes, and the frame of a test's main:
// the skip without a GPU (exit 77, ctest's SKIP_RETURN_CODE), the TESSERA_TEST_DETERMINISTIC switch,
// an exception as a failure, and the per-"op dtype" summary table with the PASSED / FAILED line.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/deterministic_mode.h"

namespace tessera::gpu_test {

constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xA5;

// False (after one SKIP line) when no CUDA device is visible: the test then exits 77.
inline bool device_visible() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return true;
  std::printf("SKIP: no CUDA device visible\n");
  return false;
}

// TESSERA_TEST_DETERMINISTIC=1 (ctest's *_deterministic runs): the same checks on the deterministic kernels.
inline void honour_deterministic_switch() {
  if (const char* mode = std::getenv("TESSERA_TEST_DETERMINISTIC"); mode && std::string(mode) == "1") {
    ops::set_deterministic_mode(true);
    std::printf("deterministic mode on (TESSERA_TEST_DETERMINISTIC=1)\n");
  }
}

// Runs a test's cases; an exception out of them is a failure (one FAIL line, false).
inline bool ran_without_exception(const std::function<void()>& cases) {
  try {
    cases();
    return true;
  } catch (const std::exception& e) {
    std::printf("FAIL: exception: %s\n", e.what());
    return false;
  }
}

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

// A guarded device copy of f32 host values stored as dtype t.
inline std::unique_ptr<DeviceTensor> upload(const std::vector<float>& v, DType t, Shape shape) {
  const auto bytes = to_bytes(v, t);
  return std::make_unique<DeviceTensor>(t, std::move(shape), bytes.data());
}

// f32 host values as a CPU tensor (the reference side of a comparison).
inline Tensor cpu(std::vector<float>& v, Shape shape) { return Tensor(v.data(), DType::f32, std::move(shape)); }

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

// One row of a parity summary: the cases of an "op dtype" key, its worst error and largest tolerance.
struct ParityResult {
  double worst = 0.0, tolerance = 0.0;
  int cases = 0;
  bool ok = true;
};

// The rows of a parity test by key, and the summary table its main ends with.
class ParityTable {
 public:
  explicit ParityTable(const char* key_heading = "op dtype", const char* error_heading = "max_norm_err")
      : key_heading_(key_heading), error_heading_(error_heading) {}

  // One case of key: counted, its error and tolerance kept if the largest so far, the row failed unless ok.
  // Returns ok (the caller counts the failure and prints its own FAIL line).
  bool record(const std::string& key, double error, double tolerance, bool ok) {
    ParityResult& r = rows_[key];
    r.tolerance = std::max(r.tolerance, tolerance);
    r.cases++;
    r.worst = std::max(r.worst, error);
    if (!ok) r.ok = false;
    return ok;
  }

  // Prints the table (the key column as wide as the longest key, at least 44) and "<title>: PASSED|FAILED
  // (N failures)"; returns the exit code, 1 with failures.
  int summarise(const char* title, int failures) const {
    int width = 44;
    for (const auto& row : rows_) width = std::max(width, static_cast<int>(row.first.size()));
    std::printf("\n%-*s %6s %12s %10s  %s\n", width, key_heading_, "cases", error_heading_, "tolerance", "result");
    for (const auto& [key, r] : rows_)
      std::printf("%-*s %6d %12.3e %10.1e  %s\n", width, key.c_str(), r.cases, r.worst, r.tolerance,
                  r.ok ? "ok" : "FAIL");
    std::printf("\n%s: %s (%d failures)\n", title, failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
  }

 private:
  const char* key_heading_;
  const char* error_heading_;
  std::map<std::string, ParityResult> rows_;
};

}  // namespace tessera::gpu_test
