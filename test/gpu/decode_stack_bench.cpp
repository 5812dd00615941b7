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

  run_layers();
  check(cudaStreamSynchronize(s), "layers");
  const std::vector<float> ref = download(out_layers, h_elems);
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
  std::printf("outputs: max |ref| %.4g, max |stack - ref| %.4g, relative rms %.3g, non-finite %zu, "
              "second launch unequal %zu of %zu\n",
              max_ref, max_diff, rel_rms, non_finite, unequal_runs, h_elems);
  // bf16 outputs after `layers` blocks whose GEMVs sum in another order: a few bf16 ulps a layer.
  const bool ok = non_finite == 0 && unequal_runs == 0 && rel_rms < 0.02;

  const double layers_us = time_graph(s, run_layers, reps);
  const double stack_us = time_graph(s, run_stack, reps);
  a.copy_mode = 1;
  const double bulk_us = time_graph(s, run_stack, reps);
  a.copy_mode = 0;
  const double bytes = double(layers) * (4.0 * hidden * hidden + 2.0 * hidden * ffn) * 2.0;
  std::printf("%-28s %10s %12s %10s\n", "path", "us/step", "us/layer", "TB/s");
  std::printf("%-28s %10.1f %12.2f %10.2f\n", "five kernels a layer", layers_us, layers_us / layers,
              bytes / layers_us / 1e6);
  std::printf("%-28s %10.1f %12.2f %10.2f\n", "decode stack (one kernel)", stack_us, stack_us / layers,
              bytes / stack_us / 1e6);
  std::printf("%-28s %10.1f %12.2f %10.2f\n", "stack, bulk copies", bulk_us, bulk_us / layers, bytes / bulk_us / 1e6);
  std::printf("speed-up %.3fx\n", layers_us / stack_us);
  // Measurement variants (DecodeStackArgs::debug; all but 8 give wrong outputs): 1 no waits for other
  // blocks, 2 no arithmetic, 3 neither, 8 test_wait spins, 16 no waits for the chunks, 17 neither wait.
  // 48: no copies and no chunk waits (the arithmetic on whatever the ring holds), 49: and no waits at all.
  for (int debug : {3, 49}) {
    a.debug = debug;
    const double us = time_graph(s, run_stack, reps);
    std::printf("stack, debug %-2d %24.1f %12.2f %10.2f\n", debug, us, us / layers, bytes / us / 1e6);
  }
  // The whole stack and its arithmetic alone (debug 49) by ring size (a smaller ring leaves more L1).
  for (auto [slot_bytes, slots] : {std::pair{25600, 6}, std::pair{38400, 3}}) {
    a.slot_bytes = slot_bytes, a.slots = slots;
    if (!decode_stack_applies(DType::bf16, a)) continue;
    a.debug = 0;
    const double us = time_graph(s, run_stack, reps);
    a.debug = 49;
    const double math_us = time_graph(s, run_stack, reps);
    std::printf("ring %6d B x %2d: stack %8.1f us (%6.2f a layer), arithmetic alone %8.1f (%6.2f)\n", slot_bytes, slots,
                us, us / layers, math_us, math_us / layers);
  }
  a.debug = 0;
  // The copies alone (debug 67: the consumers only take and free the chunks), by copy mode and slot size.
  for (int mode : {0, 1}) {
    for (int per_slot : {1, 2, 4}) {
      a.debug = 67, a.copy_mode = mode, a.slot_bytes = per_slot * 2 * std::max(hidden, ffn), a.slots = 0;
      if (!decode_stack_applies(DType::bf16, a)) continue;
      const double us = time_graph(s, run_stack, reps);
      std::printf("copies alone, %s, slot %6d B %8.1f us (%6.2f a layer) %6.2f TB/s\n", mode ? "bulk    " : "cp.async",
                  a.slot_bytes, us, us / layers, bytes / us / 1e6);
    }
  }
  a.copy_mode = 0;
  // The weight stream alone (debug 3) by slot size and count.
  const int row_bytes = 2 * std::max(hidden, ffn);
  for (int per_slot : {1, 2}) {
    for (int slots : {0, 4}) {
      a.debug = 3, a.slot_bytes = per_slot * row_bytes, a.slots = slots;
      if (!decode_stack_applies(DType::bf16, a)) continue;
      const double us = time_graph(s, run_stack, reps);
      std::printf("stream only, slot %6d B, slots %2d %8.1f %12.2f %10.2f\n", a.slot_bytes, slots, us, us / layers,
                  bytes / us / 1e6);
    }
  }
  a.slot_bytes = 0, a.slots = 0;
  a.debug = 0;

  // One traced launch: per op of a middle layer, the blocks' stamps from the layer's first stamp.
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const size_t stamps = size_t(layers) * 5 * sms * 32;
  unsigned long long* trace = nullptr;
  check(cudaMalloc(&trace, stamps * 8), "malloc");
  check(cudaMemset(trace, 0, stamps * 8), "memset");
  a.trace = trace;
  run_stack();
  check(cudaStreamSynchronize(s), "traced launch");
  std::vector<unsigned long long> t(stamps);
  check(cudaMemcpy(t.data(), trace, stamps * 8, cudaMemcpyDeviceToHost), "download");
  const auto at = [&](int l, int op, int b, int e) { return t[((size_t(l) * 5 + op) * sms + b) * 32 + e]; };
  const char* op_names[] = {"qkv", "attention", "proj", "fc1", "fc2"};
  const char* event_names[] = {"wait", "input", "chunks", "signal", "p.first", "p.last"};
  for (int l : {layers / 2}) {
    if (l >= layers) continue;
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < sms; ++b) t0 = std::min(t0, at(l, 0, b, 0));
    std::printf("layer %d (us from its first stamp; mean / max over blocks that stamped)\n", l);
    for (int op = 0; op < 5; ++op) {
      std::printf("  %-10s", op_names[op]);
      for (int e = 0; e < 6; ++e) {
        double sum = 0, mx = -1e30;
        int n = 0;
        for (int b = 0; b < sms; ++b) {
          const unsigned long long v = at(l, op, b, e);
          if (v == 0) continue;
          const double us = (double(v) - double(t0)) / 1000.0;
          sum += us, mx = std::max(mx, us), ++n;
        }
        if (n) std::printf(" %s %6.2f/%6.2f", event_names[e], sum / n, mx);
      }
      std::printf("\n");
      if (op == 0 || op == 3) {  // block 0's chunks: ready for warp 0, warp 0 done
        std::printf("    block 0 chunks ready:");
        for (int e = 6; e < 22; ++e)
          if (at(l, op, 0, e)) std::printf(" %.2f", (double(at(l, op, 0, e)) - double(t0)) / 1000.0);
        std::printf("\n    block 0 chunks done: ");
        for (int e = 22; e < 30; ++e)
          if (at(l, op, 0, e)) std::printf(" %.2f", (double(at(l, op, 0, e)) - double(t0)) / 1000.0);
        std::printf("\n");
      }
    }
  }
  std::printf("%s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
