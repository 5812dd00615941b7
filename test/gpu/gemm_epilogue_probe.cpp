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

namespace {

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t e = (call);                                                              \
    if (e != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CHECK_LT(call)                                                                                 \
  do {                                                                                                 \
    const cublasStatus_t s = (call);                                                                   \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, static_cast<int>(s)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

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
  CHECK_CUDA(cudaMemcpy(device, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

// One variant on one shape: the heuristic's algorithms, each timed over `reps` launches.
void probe(cublasLtHandle_t lt, cudaStream_t stream, const Shape& s, const Variant& v, const Buffers& b) {
  // Row-major dact[T, F] = dy[T, H] . W2[H, F] as column-major C[F, T] = W2[F, H] . dy[H, T].
  const int64_t m = s.ffn, n = s.tokens, k = s.hidden;
  cublasLtMatmulDesc_t op = nullptr;
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &v.epilogue, sizeof(v.epilogue)));
  if (v.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int64_t aux_ld = m;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &b.pre, sizeof(b.pre)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  if (v.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &v.bias_type, sizeof(v.bias_type)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b.bias_grad, sizeof(b.bias_grad)));
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t preference = nullptr;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&preference));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
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
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
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
      CHECK_LT(run());
      CHECK_CUDA(cudaEventRecord(start, stream));
      for (int r = 0; r < reps; ++r) CHECK_LT(run());
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      ms /= static_cast<float>(reps);
      if (i == 0) first_ms = ms;
      if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
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
  CHECK_CUDA(cudaGetLastError());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) reps = std::max(1, std::atoi(argv[1]));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no visible GPU: skipped\n");
    return 77;
  }
  cudaDeviceProp properties{};
  CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
  std::printf("%s, %d reps per algorithm, workspace %zu MiB\n", properties.name, reps, kWorkspaceBytes >> 20);
  cublasLtHandle_t lt = nullptr;
  CHECK_LT(cublasLtCreate(&lt));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
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
    CHECK_CUDA(cudaMalloc(&b.dy, dy * 2));
    CHECK_CUDA(cudaMalloc(&b.w2, w2 * 2));
    CHECK_CUDA(cudaMalloc(&b.pre, act * 2));
    CHECK_CUDA(cudaMalloc(&b.out, act * 2));
    CHECK_CUDA(cudaMalloc(&b.bias_grad, size_t(s.ffn) * 4));
    CHECK_CUDA(cudaMalloc(&b.workspace, kWorkspaceBytes));
    fill_random_bf16(b.dy, dy, 1);
    fill_random_bf16(b.w2, w2, 2);
    fill_random_bf16(b.pre, act, 3);
    for (const Variant& v : variants) probe(lt, stream, s, v, b);
    for (void* p : {b.dy, b.w2, b.pre, b.out, b.bias_grad, b.workspace}) CHECK_CUDA(cudaFree(p));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  cublasLtDestroy(lt);
  return 0;
}
