// The persistent decode stack (kernels/decode_stack.h) against the five-kernel fused layer
// (decode_linear + cached attention, the path tessera-generate runs now) on random GPT-2-shaped
// weights, bf16, one GPU: both paths run the same layers on the same inputs and caches; the check
// compares their outputs (they differ only in fp32 summation order) and the stack's output with itself
// over two launches (bitwise: its counters must order every read after its write), then both paths
// are timed as graph replays of one decode step's layers.
// Usage: gpu_decode_stack_bench [layers hidden heads ffn rows past reps]  (default: the 1.5B shape,
// 48 1600 25 6400 1 255 50). Exit 0 when the checks pass, 1 when not, 77 without a GPU.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cached_attention.h"
#include "kernels/decode_linear.h"
#include "kernels/decode_stack.h"

using namespace tessera;
using namespace tessera::kernels;

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A device bf16 buffer of n values drawn as mean + scale * N(0, 1).
void* random_device(size_t n, float mean, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> host(n);
  for (auto& v : host) v = to_bf16(mean + scale * normal(rng));
  void* d = nullptr;
  check(cudaMalloc(&d, n * 2), "malloc");
  check(cudaMemcpy(d, host.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  return d;
}

std::vector<float> download(const void* d, size_t n) {
  std::vector<uint16_t> host(n);
  check(cudaMemcpy(host.data(), d, n * 2, cudaMemcpyDeviceToHost), "download");
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16(host[i]);
  return out;
}

// Microseconds per replay of a graph of fn.
double time_graph(cudaStream_t s, const std::function<void()>& fn, int reps) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
  fn();
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, s), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, s), "record");
  for (int i = 0; i < reps; ++i) check(cudaGraphLaunch(exec, s), "launch");
  check(cudaEventRecord(stop, s), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  check(cudaGraphExecDestroy(exec), "destroy");
  check(cudaGraphDestroy(graph), "destroy");
  return 1000.0 * ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device visible\n");
    return 77;
  }
  const auto arg = [&](int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; };
  const int layers = arg(1, 48), hidden = arg(2, 1600), heads = arg(3, 25), ffn = arg(4, 6400), rows = arg(5, 1);
  const int past = arg(6, 255), reps = arg(7, 50);
  const int head_dim = hidden / heads;
  const int64_t capacity = 384;
  std::printf("decode stack bench: %d layers, hidden %d, %d heads, ffn %d, %d rows, %d cached tokens\n", layers,
              hidden, heads, ffn, rows, past);
  std::mt19937 rng(1234);
  std::vector<DecodeStackLayer> host_layers(layers);
  const float w_scale = 0.02f;
  for (auto& L : host_layers) {
    L.ln1_weight = random_device(hidden, 1.0f, 0.1f, rng);
    L.ln1_bias = random_device(hidden, 0.0f, 0.05f, rng);
    L.qkv_weight = random_device(size_t(3) * hidden * hidden, 0.0f, w_scale, rng);
    L.qkv_bias = random_device(size_t(3) * hidden, 0.0f, 0.02f, rng);
    L.proj_weight = random_device(size_t(hidden) * hidden, 0.0f, w_scale, rng);
    L.proj_bias = random_device(hidden, 0.0f, 0.02f, rng);
    L.ln2_weight = random_device(hidden, 1.0f, 0.1f, rng);
    L.ln2_bias = random_device(hidden, 0.0f, 0.05f, rng);
    L.fc1_weight = random_device(size_t(ffn) * hidden, 0.0f, w_scale, rng);
    L.fc1_bias = random_device(ffn, 0.0f, 0.02f, rng);
    L.fc2_weight = random_device(size_t(hidden) * ffn, 0.0f, w_scale, rng);
    L.fc2_bias = random_device(hidden, 0.0f, 0.02f, rng);
    L.k_cache = random_device(size_t(rows) * capacity * hidden, 0.0f, 1.0f, rng);
    L.v_cache = random_device(size_t(rows) * capacity * hidden, 0.0f, 1.0f, rng);
  }
  DecodeStackLayer* device_layers = nullptr;
  check(cudaMalloc(&device_layers, sizeof(DecodeStackLayer) * layers), "malloc");
  check(cudaMemcpy(device_layers, host_layers.data(), sizeof(DecodeStackLayer) * layers, cudaMemcpyHostToDevice),
        "upload");
  void* in = random_device(size_t(rows) * hidden, 0.0f, 1.0f, rng);
  int32_t* past_device = nullptr;
  check(cudaMalloc(&past_device, 4), "malloc");
  check(cudaMemcpy(past_device, &past, 4, cudaMemcpyHostToDevice), "upload");
  const size_t h_elems = size_t(rows) * hidden;
  void *qkv, *context, *h, *activation, *x[2], *out_layers, *out_stack;
  for (void** p : {&qkv}) check(cudaMalloc(p, h_elems * 3 * 2), "malloc");
  for (void** p : {&context, &h, &x[0], &x[1], &out_layers, &out_stack}) check(cudaMalloc(p, h_elems * 2), "malloc");
  check(cudaMalloc(&activation, size_t(rows) * ffn * 2), "malloc");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");

  const auto run_layers = [&] {  // the five-kernel fused layer, as nn::TransformerLayer::forward_cached_fused
    for (int l = 0; l < layers; ++l) {
      const DecodeStackLayer& L = host_layers[l];
      const void* x_in = l == 0 ? in : x[l & 1];
      void* x_out = l + 1 == layers ? out_layers : x[(l + 1) & 1];
      DecodeLinearArgs d;
      d.rows = rows;
      d.in = x_in, d.ln_weight = L.ln1_weight, d.ln_bias = L.ln1_bias, d.weight = L.qkv_weight, d.bias = L.qkv_bias;
      d.n_out = 3 * hidden, d.k_in = hidden, d.out = qkv;
      decode_linear_forward(DType::bf16, d, s);
      CachedAttentionArgs c;
      c.tokens = 1, c.batch = rows, c.num_heads = heads, c.num_query_groups = heads, c.head_dim = head_dim;
      c.capacity = capacity, c.past = past, c.past_device = past_device;
      c.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      c.programmatic = true;
      cached_attention_forward(DType::bf16, qkv, nullptr, c, L.k_cache, L.v_cache, context, s);
      d = DecodeLinearArgs{};
      d.rows = rows, d.in = context, d.weight = L.proj_weight, d.bias = L.proj_bias;
      d.epilogue = DecodeEpilogue::residual_add, d.residual = x_in, d.n_out = hidden, d.k_in = hidden, d.out = h;
      decode_linear_forward(DType::bf16, d, s);
      d = DecodeLinearArgs{};
      d.rows = rows, d.in = h, d.ln_weight = L.ln2_weight, d.ln_bias = L.ln2_bias, d.weight = L.fc1_weight;
      d.bias = L.fc1_bias, d.epilogue = DecodeEpilogue::gelu_tanh, d.n_out = ffn, d.k_in = hidden, d.out = activation;
      decode_linear_forward(DType::bf16, d, s);
      d = DecodeLinearArgs{};
      d.rows = rows, d.in = activation, d.weight = L.fc2_weight, d.bias = L.fc2_bias;
      d.epilogue = DecodeEpilogue::residual_add, d.residual = h, d.n_out = hidden, d.k_in = ffn, d.out = x_out;
      decode_linear_forward(DType::bf16, d, s);
    }
  };
  DecodeStackArgs a;
  a.layers = device_layers, a.num_layers = layers, a.rows = rows, a.hidden = hidden, a.heads = heads;
  a.head_dim = head_dim, a.ffn = ffn, a.ln_eps = 1e-5f, a.gelu_erf = false;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.capacity = capacity, a.past_device = past_device, a.key_mask = nullptr, a.in = in, a.out = out_stack;
  const size_t ws_bytes = decode_stack_workspace_bytes(DType::bf16, a);
  check(cudaMalloc(&a.workspace, ws_bytes), "malloc");
  check(cudaMemset(a.workspace, 0, ws_bytes), "memset");
  if (!decode_stack_applies(DType::bf16, a)) {
    std::printf("FAILED: decode_stack_applies says no\n");
    return 1;
  }
  const auto run_stack = [&] { decode_stack_forward(DType::bf16, a, s); };

  if (const char* profile = std::getenv("DECODE_STACK_PROFILE")) {  // one launch with that debug value, for ncu
    a.debug = std::atoi(profile);
    run_stack();
    check(cudaStreamSynchronize(s), "profiled launch");
    std::printf("one launch, debug %d\n", a.debug);
    return 0;
  }
  run_layers();
  check(cudaStreamSynchronize(s), "layers");
  const std::vector<float> ref = download(out_layers, h_elems);
  // The stack's output against the five kernels' (relative rms), and two launches bitwise equal.
  const auto check_stack = [&](const char* what) {
    a.debug = 0;
    run_stack();
    check(cudaStreamSynchronize(s), "stack");
    const std::vector<float> got = download(out_stack, h_elems);
    run_stack();
    check(cudaStreamSynchronize(s), "stack again");
    const std::vector<float> again = download(out_stack, h_elems);
    double max_ref = 0, max_diff = 0, sum_sq = 0, sum_sq_ref = 0;
    size_t unequal_runs = 0, non_finite = 0;
    for (size_t i = 0; i < h_elems; ++i) {
      if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) ++non_finite;
      max_ref = std::max(max_ref, double(std::fabs(ref[i])));
      max_diff = std::max(max_diff, double(std::fabs(ref[i] - got[i])));
      sum_sq += double(ref[i] - got[i]) * (ref[i] - got[i]);
      sum_sq_ref += double(ref[i]) * ref[i];
      if (std::memcmp(&got[i], &again[i], 4) != 0) ++unequal_runs;
    }
    const double rel_rms = std::sqrt(sum_sq / std::max(sum_sq_ref, 1e-30));
    std::printf("%s: max |ref| %.4g, max |stack - ref| %.4g, relative rms %.3g, non-finite %zu, "
                "second launch unequal %zu of %zu\n",
                what, max_ref, max_diff, rel_rms, non_finite, unequal_runs, h_elems);
    // bf16 outputs after `layers` blocks whose GEMVs sum in another order: a few bf16 ulps a layer.
    return non_finite == 0 && unequal_runs == 0 && rel_rms < 0.02;
  };
  bool ok = check_stack("outputs");

  const double layers_us = time_graph(s, run_layers, reps);
  const double stack_us = time_graph(s, run_stack, reps);
  const double bytes = double(layers) * (4.0 * hidden * hidden + 2.0 * hidden * ffn) * 2.0;
  std::printf("%-28s %10s %12s %10s\n", "path", "us/step", "us/layer", "TB/s");
  std::printf("%-28s %10.1f %12.2f %10.2f\n", "five kernels a layer", layers_us, layers_us / layers,
              bytes / layers_us / 1e6);
  std::printf("%-28s %10.1f %12.2f %10.2f\n", "decode stack (one kernel)", stack_us, stack_us / layers,
              bytes / stack_us / 1e6);
  std::printf("speed-up %.3fx\n", layers_us / stack_us);
  // Measurement variants (DecodeStackArgs::debug; wrong outputs): 3 the stream with the per-op work
  // but no waits and no arithmetic, 49 the arithmetic, LayerNorms, attention and signals alone (no
  // copies, no waits), 67 the copies alone (the consumers only take and free the chunks).
  const auto variants = [&](const char* what) {
    for (int debug : {3, 49, 67}) {
      a.debug = debug;
      const double us = time_graph(s, run_stack, reps);
      std::printf("  %s debug %-2d %10.1f us %8.2f a layer %6.2f TB/s\n", what, debug, us, us / layers, bytes / us / 1e6);
      std::fflush(stdout);
    }
    a.debug = 0;
    // Debug 64 skips the signals but not the epoch's advance: start the counters afresh.
    check(cudaMemset(a.workspace, 0, ws_bytes), "memset");
  };
  variants("default ring");
  // The whole stack by ring size: each checked, timed, and its parts timed.
  for (auto [slot_bytes, slots] : {std::pair{65536, 3}, std::pair{98304, 2}}) {
    a.slot_bytes = slot_bytes, a.slots = slots;
    if (!decode_stack_applies(DType::bf16, a)) continue;
    char what[64];
    std::snprintf(what, sizeof what, "ring %6d B x %d", slot_bytes, slots);
    ok = check_stack(what) && ok;
    const double us = time_graph(s, run_stack, reps);
    std::printf("  %s: stack %8.1f us (%6.2f a layer)\n", what, us, us / layers);
    variants(what);
  }
  a.slot_bytes = 0, a.slots = 0;
  a.debug = 0;

  // Traced launches (the whole stack, then its consumers' own work alone, debug 49): per op of a
  // middle layer, the blocks' stamps from the layer's first stamp.
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const size_t stamps = size_t(layers) * 5 * sms * 32;
  unsigned long long* trace = nullptr;
  check(cudaMalloc(&trace, stamps * 8), "malloc");
  for (int debug : {0, 49}) {
    check(cudaMemset(trace, 0, stamps * 8), "memset");
    check(cudaMemset(a.workspace, 0, ws_bytes), "memset");
    a.trace = trace, a.debug = debug;
    run_stack();
    check(cudaStreamSynchronize(s), "traced launch");
    a.trace = nullptr, a.debug = 0;
    check(cudaMemset(a.workspace, 0, ws_bytes), "memset");
    std::vector<unsigned long long> t(stamps);
    check(cudaMemcpy(t.data(), trace, stamps * 8, cudaMemcpyDeviceToHost), "download");
    const auto at = [&](int l, int op, int b, int e) { return t[((size_t(l) * 5 + op) * sms + b) * 32 + e]; };
    const char* op_names[] = {"qkv", "attention", "proj", "fc1", "fc2"};
    // Stamps in time order: wait begins, wait over, input ready, chunks done, epilogue done, signalled;
    // the producer's first and last copy of the op issued.
    const int events[] = {0, 6, 1, 2, 7, 3, 4, 5};
    const char* event_names[] = {"begin", "waited", "input", "chunks", "epilog", "signal", "p.first", "p.last"};
    const int l = layers / 2;
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < sms; ++b) t0 = std::min(t0, at(l, 0, b, 0));
    std::printf("debug %d, layer %d (us from its first stamp; mean / max over blocks that stamped)\n", debug, l);
    for (int op = 0; op < 5; ++op) {
      std::printf("  %-9s", op_names[op]);
      for (int i = 0; i < 8; ++i) {
        double sum = 0, mx = -1e30;
        int n = 0;
        for (int b = 0; b < sms; ++b) {
          const unsigned long long v = at(l, op, b, events[i]);
          if (v == 0) continue;
          const double us = (double(v) - double(t0)) / 1000.0;
          sum += us, mx = std::max(mx, us), ++n;
        }
        if (n) std::printf(" %s %.2f/%.2f", event_names[i], sum / n, mx);
      }
      std::printf("\n");
    }
  }
  std::printf("%s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
