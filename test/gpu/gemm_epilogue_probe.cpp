// What cuBLASLt offers for the MLP's backward GEMM on this GPU, for issue 20's step: fc2's data
// gradient dact[T, F] = dy[T, H] . W2[H, F] (row-major; bf16 operands, fp32 compute) with no epilogue,
// with DGELU (gelu' of the pre-activation applied in the epilogue: what ops::linear_backward_dgelu runs)
// and with DGELU_BGRAD (that, plus fc1's bias gradient, the column sums of the result, with an fp32 or
// a bf16 bias gradient). For each variant: how many algorithms the heuristic offers (up to 8), the
// time of its first choice and of the fastest, and TFLOP/s. The 124M step's DGELU GEMM runs at ~450
// TFLOP/s where its other GEMMs reach ~640 (docs/training-performance.md), and session 17 found no
// DGELU_BGRAD algorithm with an fp32 bias gradient; this prints what the next attempt can use.
// Usage: gpu_gemm_epilogue_probe [reps] (default 20). Exits 77 without a visible GPU.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/cuda/cuda_context.h"

namespace {

int reps = 20;
constexpr int kCandidates = 8;
constexpr size_t kWorkspaceBytes = size_t(64) << 20;

struct Shape {
  const char* name;
  int64_t tokens, hidden, ffn;
};

struct Variant {
  const char* name;
  cublasLtEpilogue_t epilogue;
  cudaDataType_t bias_type;  // for BGRAD
};

struct Buffers {
  void *dy = nullptr, *w2 = nullptr, *pre = nullptr, *out = nullptr, *bias_grad = nullptr, *workspace = nullptr;
};

void fill_random_bf16(void* device, size_t n, unsigned seed) {
  std::vector<__nv_bfloat16> host(n);
  unsigned state = seed;
  for (size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    host[i] = __float2bfloat16((static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.2f);
  }
  TESSERA_CUDA_CHECK(cudaMemcpy(device, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

// One variant on one shape: the heuristic's algorithms, each timed over `reps` launches.
void probe(cublasLtHandle_t lt, cudaStream_t stream, const Shape& s, const Variant& v, const Buffers& b) {
  // Row-major dact[T, F] = dy[T, H] . W2[H, F] as column-major C[F, T] = W2[F, H] . dy[H, T].
  const int64_t m = s.ffn, n = s.tokens, k = s.hidden;
  cublasLtMatmulDesc_t op = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &v.epilogue, sizeof(v.epilogue)));
  if (v.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int64_t aux_ld = m;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &b.pre, sizeof(b.pre)));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  if (v.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &v.bias_type, sizeof(v.bias_type)));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b.bias_grad, sizeof(b.bias_grad)));
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t preference = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                sizeof(kWorkspaceBytes)));
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  const cublasStatus_t heuristic =
      cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, preference, kCandidates, results, &found);
  const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  std::string line = std::string(s.name) + " | " + v.name + " | ";
  if (heuristic != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("| %s%d algorithms (status %d) | - | - | - |\n", line.c_str(), found, static_cast<int>(heuristic));
  } else {
    cudaEvent_t start = nullptr, stop = nullptr;
    TESSERA_CUDA_CHECK(cudaEventCreate(&start));
    TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = 0.0f;
    float first_ms = -1.0f, best_ms = -1.0f;
    int best = -1, usable = 0;
    for (int i = 0; i < found; ++i) {
      auto run = [&] {
        return cublasLtMatmul(lt, op, &alpha, b.w2, la, b.dy, lb, &beta, b.out, lc, b.out, lc, &results[i].algo,
                              b.workspace, kWorkspaceBytes, stream);
      };
      if (results[i].state != CUBLAS_STATUS_SUCCESS || run() != CUBLAS_STATUS_SUCCESS) continue;
      ++usable;
      TESSERA_CUBLAS_CHECK(run());
      TESSERA_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < reps; ++r) TESSERA_CUBLAS_CHECK(run());
      TESSERA_CUDA_CHECK(cudaEventRecord(stop, stream));
      TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      ms /= static_cast<float>(reps);
      if (i == 0) first_ms = ms;
      if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    TESSERA_CUDA_CHECK(cudaEventDestroy(start));
    TESSERA_CUDA_CHECK(cudaEventDestroy(stop));
    if (best < 0) {
      std::printf("| %s%d offered, none launched | - | - | - |\n", line.c_str(), found);
    } else {
      std::printf("| %s%d offered, %d launched | %.3f | %.3f (#%d) | %.0f |\n", line.c_str(), found, usable,
                  first_ms, best_ms, best, flop / (best_ms * 1e-3) / 1e12);
    }
  }
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void run_probe() {
  cudaDeviceProp properties{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("%s, %d reps per algorithm, workspace %zu MiB\n", properties.name, reps, kWorkspaceBytes >> 20);
  cublasLtHandle_t lt = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt));
  cudaStream_t stream = nullptr;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&stream));
  const Shape shapes[] = {{"124M MLP (T 16384, H 768, F 3072)", 16384, 768, 3072},
                          {"1.5B MLP (T 8192, H 1600, F 6400)", 8192, 1600, 6400}};
  const Variant variants[] = {{"no epilogue", CUBLASLT_EPILOGUE_DEFAULT, CUDA_R_32F},
                              {"DGELU", CUBLASLT_EPILOGUE_DGELU, CUDA_R_32F},
                              {"DGELU_BGRAD, fp32 bias gradient", CUBLASLT_EPILOGUE_DGELU_BGRAD, CUDA_R_32F},
                              {"DGELU_BGRAD, bf16 bias gradient", CUBLASLT_EPILOGUE_DGELU_BGRAD, CUDA_R_16BF}};
  std::printf("| shape | variant | algorithms | first ms | fastest ms | fastest TFLOP/s |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& s : shapes) {
    Buffers b;
    const size_t dy = size_t(s.tokens) * s.hidden, w2 = size_t(s.hidden) * s.ffn, act = size_t(s.tokens) * s.ffn;
    TESSERA_CUDA_CHECK(cudaMalloc(&b.dy, dy * 2));
    TESSERA_CUDA_CHECK(cudaMalloc(&b.w2, w2 * 2));
    TESSERA_CUDA_CHECK(cudaMalloc(&b.pre, act * 2));
    TESSERA_CUDA_CHECK(cudaMalloc(&b.out, act * 2));
    TESSERA_CUDA_CHECK(cudaMalloc(&b.bias_grad, size_t(s.ffn) * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&b.workspace, kWorkspaceBytes));
    fill_random_bf16(b.dy, dy, 1);
    fill_random_bf16(b.w2, w2, 2);
    fill_random_bf16(b.pre, act, 3);
    for (const Variant& v : variants) probe(lt, stream, s, v, b);
    for (void* p : {b.dy, b.w2, b.pre, b.out, b.bias_grad, b.workspace}) TESSERA_CUDA_CHECK(cudaFree(p));
  }
  TESSERA_CUDA_CHECK(cudaStreamDestroy(stream));
  cublasLtDestroy(lt);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) reps = std::max(1, std::atoi(argv[1]));
  if (!tessera::gpu_test::device_visible()) return 77;
  try {
    run_probe();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_gemm_epilogue_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
