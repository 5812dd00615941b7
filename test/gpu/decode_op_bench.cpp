// Per-op cost of one greedy decode step on one GPU (bf16), for finding where decode time goes when
// Nsight is not available: for the GPT-2 124M (hidden 768, 12 heads, 12 layers) and 1.5B (hidden 1600,
// 25 heads, 48 layers) shapes at batch 1 and 32 with a KV cache of 384 tokens (383 cached, the new
// token at index 383), times each op of a step with cudaEvents over many repetitions: the QKV, proj,
// fc1 and fc2 linears, GeLU, the layernorms, the residual adds, attention over the cache, the LM-head
// GEMM and the greedy row reduction, then GPTModel::forward_cached of a 1-layer and of the whole model.
// Each op is timed twice: eagerly (reps launched back to back: includes launch gaps when the kernel
// is shorter than its launch) and replayed from a CUDA graph of the reps (the GPU time alone, what the
// graph-captured decode step pays). Prints microseconds per op and the bytes each op must move
// (weights, cache, activations) as achieved GB/s against 4.3 TB/s (H200 HBM3e).
// Usage: gpu_decode_op_bench [reps]  (default 200). Exits 77 without a visible GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/argmax.h"
#include "tessera/ops/bias_dropout_add.h"
#include "tessera/ops/cached_attention.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/layernorm.h"
#include "tessera/ops/linear.h"
#include "tessera/runtime/compute_stream.h"
#include "tessera/train/config.h"

using namespace tessera;

namespace {

constexpr double kPeakBytesPerSecond = 4.3e12;
int reps = 200;

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

// Microseconds per call of fn: eager (reps calls) and replayed from a graph of the reps.
std::pair<double, double> time_op(const std::function<void()>& fn) {
  cudaStream_t s = compute_stream();
  for (int i = 0; i < 3; ++i) fn();  // warm-up (plans, first-touch)
  check(cudaStreamSynchronize(s), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, s), "record");
  for (int i = 0; i < reps; ++i) fn();
  check(cudaEventRecord(stop, s), "record");
  check(cudaEventSynchronize(stop), "sync");
  float eager_ms = 0;
  check(cudaEventElapsedTime(&eager_ms, start, stop), "elapsed");
  double graph_us = -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
  bool captured = true;
  try {
    for (int i = 0; i < reps; ++i) fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "capture failed: %s\n", e.what());
    captured = false;
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (captured && end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    check(cudaGraphLaunch(exec, s), "graph warm-up");
    check(cudaEventRecord(start, s), "record");
    check(cudaGraphLaunch(exec, s), "graph launch");
    check(cudaEventRecord(stop, s), "record");
    check(cudaEventSynchronize(stop), "sync");
    float graph_ms = 0;
    check(cudaEventElapsedTime(&graph_ms, start, stop), "elapsed");
    graph_us = 1000.0 * graph_ms / reps;
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return {1000.0 * eager_ms / reps, graph_us};
}

void report(const std::string& shape, int64_t batch, const std::string& op, double bytes,
            const std::function<void()>& fn) {
  const auto [eager, graph] = time_op(fn);
  const double best = graph > 0 ? graph : eager;
  const double gbs = bytes / (best * 1e-6) / 1e9;
  std::printf("%-5s batch %2lld  %-28s eager %9.2f us  graph %9.2f us  %8.3f MB  %7.0f GB/s (%4.1f%% of 4.3 TB/s)\n",
              shape.c_str(), static_cast<long long>(batch), op.c_str(), eager, graph, bytes / 1e6, gbs,
              100.0 * bytes / (best * 1e-6) / kPeakBytesPerSecond);
}

train::ModelConfig gpt_config(int64_t layers, int64_t hidden, int64_t heads) {
  train::ModelConfig m = train::load_config("", {"data.mock_data=true", "data.vocab_size=50257"}).model;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.seq_length = 1024;
  m.max_position_embeddings = 1024;
  m.hidden_dropout = m.attention_dropout = 0.0;
  return m;
}

void bench_shape(const std::string& shape, int64_t layers, int64_t hidden, int64_t heads, int64_t batch) {
  const DType t = DType::bf16;
  const Device gpu = Device::cuda(0);
  const int64_t capacity = 384, past = capacity - 1, hn = hidden / heads, ffn = 4 * hidden, vocab = 50304;
  const double e = 2.0;  // bytes per bf16 element
  Arena arena(size_t(1) << 30, gpu);
  auto filled = [&](DType dt, Shape shape, double value) {
    Tensor x = arena.allocate(dt, shape);
    ops::fill(x, value);
    return x;
  };
  Tensor x = filled(t, {batch, hidden}, 0.5), residual = filled(t, {batch, hidden}, 0.25);
  Tensor ln_w = filled(t, {hidden}, 1.0), ln_b = filled(t, {hidden}, 0.0);
  Tensor mean = arena.allocate(DType::f32, {batch}), rstd = arena.allocate(DType::f32, {batch});
  Tensor w_qkv = filled(t, {3 * hidden, hidden}, 0.01), b_qkv = filled(t, {3 * hidden}, 0.0);
  Tensor w_proj = filled(t, {hidden, hidden}, 0.01), b_proj = filled(t, {hidden}, 0.0);
  Tensor w_fc1 = filled(t, {ffn, hidden}, 0.01), b_fc1 = filled(t, {ffn}, 0.0);
  Tensor w_fc2 = filled(t, {hidden, ffn}, 0.01), b_fc2 = filled(t, {hidden}, 0.0);
  Tensor w_head = filled(t, {vocab, hidden}, 0.01);
  Tensor qkv = filled(t, {1, batch, 3 * hidden}, 0.1), context = arena.allocate(t, {1, batch, hidden});
  Tensor k_cache = filled(t, {batch, capacity, hidden}, 0.1), v_cache = filled(t, {batch, capacity, hidden}, 0.1);
  std::vector<uint8_t> ones(static_cast<size_t>(batch * capacity), 1);
  Tensor mask = arena.allocate(DType::u8, {batch, capacity});
  ops::copy(Tensor(ones.data(), DType::u8, {batch, capacity}), mask);
  Tensor out_h = arena.allocate(t, {batch, hidden}), out_qkv = arena.allocate(t, {batch, 3 * hidden});
  Tensor out_ffn = arena.allocate(t, {batch, ffn}), gelu_out = arena.allocate(t, {batch, ffn});
  Tensor logits = arena.allocate(t, {batch, vocab});
  Tensor index = arena.allocate(DType::i32, {batch}), logprob = arena.allocate(DType::f32, {batch});
  ops::AttentionParams p;
  p.num_heads = heads;
  p.num_query_groups = heads;
  p.head_dim = hn;
  const RandomStream unused(0, 0);
  const double act = batch * hidden * e;  // one activation row set

  report(shape, batch, "layernorm", 2 * act, [&] { ops::layernorm_forward(x, ln_w, ln_b, 1e-5, out_h, mean, rstd); });
  report(shape, batch, "qkv linear (+bias)", 3.0 * hidden * hidden * e + 4 * act,
         [&] { ops::linear_forward(x, w_qkv, b_qkv, out_qkv); });
  report(shape, batch, "cached attention (384)", 2.0 * batch * capacity * hidden * e + 4 * act,
         [&] { ops::cached_attention_forward(qkv, mask, p, k_cache, v_cache, past, context); });
  report(shape, batch, "proj linear (+bias)", 1.0 * hidden * hidden * e + 2 * act,
         [&] { ops::linear_forward(context.view({batch, hidden}), w_proj, b_proj, out_h); });
  report(shape, batch, "residual add", 3 * act,
         [&] { ops::bias_dropout_add_forward(out_h, Tensor(), residual, 0.0, unused, 0, out_h); });
  report(shape, batch, "fc1 linear (+bias)", 4.0 * hidden * hidden * e + 5 * act,
         [&] { ops::linear_forward(x, w_fc1, b_fc1, out_ffn); });
  report(shape, batch, "gelu", 8 * act, [&] { ops::gelu_forward(out_ffn, gelu_out); });
  report(shape, batch, "fc2 linear (+bias)", 4.0 * hidden * hidden * e + 5 * act,
         [&] { ops::linear_forward(gelu_out, w_fc2, b_fc2, out_h); });
  // The fused decode linears (ops/decode_linear.h; at batch > 8 they run the separate ops).
  using E = ops::DecodeEpilogue;
  Tensor out_h2 = arena.allocate(t, {batch, hidden});
  Arena scratch(size_t(64) << 20, gpu);  // the separate ops' intermediates, reused each call
  report(shape, batch, "fused ln1+qkv", 3.0 * hidden * hidden * e + 4 * act, [&] {
    scratch.reset();
    ops::decode_linear_forward(scratch, x, {ln_w, ln_b, 1e-5, w_qkv, b_qkv, E::none, Tensor()}, out_qkv);
  });
  report(shape, batch, "fused proj+residual", 1.0 * hidden * hidden * e + 3 * act, [&] {
    scratch.reset();
    ops::decode_linear_forward(scratch, context.view({batch, hidden}),
                               {Tensor(), Tensor(), 0.0, w_proj, b_proj, E::residual_add, residual}, out_h2);
  });
  report(shape, batch, "fused ln2+fc1+gelu", 4.0 * hidden * hidden * e + 5 * act, [&] {
    scratch.reset();
    ops::decode_linear_forward(scratch, x, {ln_w, ln_b, 1e-5, w_fc1, b_fc1, E::gelu_tanh, Tensor()}, gelu_out);
  });
  report(shape, batch, "fused fc2+residual", 4.0 * hidden * hidden * e + 6 * act, [&] {
    scratch.reset();
    ops::decode_linear_forward(scratch, gelu_out, {Tensor(), Tensor(), 0.0, w_fc2, b_fc2, E::residual_add, residual},
                               out_h2);
  });
  report(shape, batch, "lm head GEMM (50304)", 1.0 * vocab * hidden * e + batch * vocab * e,
         [&] { ops::linear_forward(x, w_head, Tensor(), logits); });
  report(shape, batch, "argmax_log_softmax", 1.0 * batch * vocab * e,
         [&] { ops::argmax_log_softmax(logits, 50257, index, logprob); });

  // Whole model: 1 layer and all layers, a decode step at cache index 383.
  const double layer_weights = 12.0 * hidden * hidden * e;
  double model_us[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const int64_t n = which == 0 ? 1 : layers;
    models::GPTModel model(gpt_config(n, hidden, heads), 50257, t, gpu);
    model.initialize(1);
    Arena cache_arena(size_t(2) << 30, gpu), step(size_t(256) << 20, gpu);
    models::GPTKvCache cache = model.allocate_kv_cache(cache_arena, batch, capacity);
    std::vector<int32_t> host_ids(static_cast<size_t>(batch), 11), host_pos(static_cast<size_t>(batch), 383);
    Tensor ids = cache_arena.allocate(DType::i32, {batch}), pos = cache_arena.allocate(DType::i32, {batch});
    ops::copy(Tensor(host_ids.data(), DType::i32, {batch}), ids);
    ops::copy(Tensor(host_pos.data(), DType::i32, {batch}), pos);
    int32_t host_past = static_cast<int32_t>(past);
    ops::copy(Tensor(&host_past, DType::i32, {1}), cache.past_device);
    Tensor kmask = cache_arena.allocate(DType::u8, {batch, capacity});
    ops::copy(Tensor(ones.data(), DType::u8, {batch, capacity}), kmask);
    const double bytes = n * (layer_weights + 2.0 * batch * capacity * hidden * e) + 1.0 * vocab * hidden * e;
    auto step_fn = [&] {
      step.reset();
      Tensor out = model.forward_cached(0, step, ids, pos, Tensor(), kmask, cache, past, 1, true);
      ops::argmax_log_softmax(out, 50257, index, logprob);
    };
    const auto [eager, graph] = time_op(step_fn);
    model_us[which] = graph > 0 ? graph : eager;
    report(shape, batch, "forward_cached+argmax " + std::to_string(n) + "L", bytes, step_fn);
    (void)eager;
  }
  const double per_layer = (model_us[1] - model_us[0]) / static_cast<double>(layers - 1);
  const double layer_bytes = layer_weights + 2.0 * batch * capacity * hidden * e;
  std::printf("%-5s batch %2lld  %-28s %9.2f us per layer (from the 1-layer and %lld-layer models), %7.0f GB/s; "
              "model %.1f new tokens/s at this cache length\n",
              shape.c_str(), static_cast<long long>(batch), "=> one layer", per_layer, static_cast<long long>(layers),
              layer_bytes / (per_layer * 1e-6) / 1e9, batch * 1e6 / model_us[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!gpu_test::device_visible()) return 77;
  if (argc > 1) reps = std::max(1, std::atoi(argv[1]));
  std::printf("decode op bench: bf16, KV cache 384 (383 cached), %d reps per op; us per call, eager and from a "
              "CUDA graph\n", reps);
  for (int64_t batch : {1, 32}) {
    bench_shape("124M", 12, 768, 12, batch);
    bench_shape("1.5B", 48, 1600, 25, batch);
  }
  return 0;
}
