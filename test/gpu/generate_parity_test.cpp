// Generation's CUDA ops against their CPU references: attention over a KV cache (prefill, then one
// token at a time, left padding, grouped queries, ALiBi with a tensor-parallel head slice, the
// whole-head kernel of small batches, over caches of one and of several chunks; f32 and bf16; the
// written caches too), the greedy row
// reduction (argmax + log-softmax, padded vocabulary columns ignored), the fused decode linear
// (LayerNorm prologue, GEMV, GeLU / residual-add epilogues; the GPT-2 1.5B block's shapes), and
// whole-model decoding (GPTModel::forward_cached: a prefill then cached steps of a left-padded batch)
// of a Llama-style model (RoPE at per-row positions, GQA, RMSNorm, SwiGLU), an ALiBi GPT and a GPT-2
// (bf16 steps: the fused decode layer) against the CPU f32 model with the same weights. Prints one
// line per case as it finishes (line-buffered); exits 1 on a failure, 77 without a visible GPU.
#include <cmath>
#include <cstdio>
#include <random>

#include "device_test_support.h"
#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"
#include "tessera/ops/argmax.h"
#include "tessera/ops/cached_attention.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/elementwise.h"
#include "tessera/train/config.h"

using namespace tessera;
using namespace tessera::gpu_test;

namespace {
int failures = 0;

void cached_attention_case(const char* name, DType t, int64_t batch, int64_t na, int64_t ng, int64_t hn, int64_t prefill,
                           int64_t steps, int64_t alibi_heads = 0, int64_t alibi_first_head = 0) {
  std::mt19937 rng(11);
  const int64_t seq = prefill + steps, capacity = seq + 3, width = (na + 2 * ng) * hn;
  const std::vector<float> qkv = random_normal(rng, seq * batch * width, 1.0f, t);
  std::vector<uint8_t> mask(static_cast<size_t>(batch * capacity), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = b % 4; s < seq; ++s) mask[b * capacity + s] = 1;  // row b: b % 4 padding tokens
  ops::AttentionParams p;
  p.num_heads = na;
  p.num_query_groups = ng;
  p.head_dim = hn;
  p.alibi = alibi_heads > 0;
  p.alibi_heads = alibi_heads;
  p.alibi_first_head = alibi_first_head;
  // CPU reference in f32.
  std::vector<float> kc(static_cast<size_t>(batch * capacity * ng * hn)), vc(kc.size()),
      out(static_cast<size_t>(seq * batch * na * hn));
  Tensor k_cpu(kc.data(), DType::f32, {batch, capacity, ng * hn}), v_cpu(vc.data(), DType::f32, {batch, capacity, ng * hn});
  Tensor mask_cpu(mask.data(), DType::u8, {batch, capacity});
  const int64_t row = batch * width, out_row = batch * na * hn;
  auto cpu_call = [&](int64_t s0, int64_t n) {
    ops::cached_attention_forward(Tensor(const_cast<float*>(qkv.data()) + s0 * row, DType::f32, {n, batch, width}),
                                  mask_cpu, p, k_cpu, v_cpu, s0,
                                  Tensor(out.data() + s0 * out_row, DType::f32, {n, batch, na * hn}));
  };
  cpu_call(0, prefill);
  for (int64_t s = prefill; s < seq; ++s) cpu_call(s, 1);
  // GPU.
  const auto qkv_bytes = to_bytes(qkv, t);
  DeviceTensor d_qkv(t, {seq, batch, width}, qkv_bytes.data()), d_mask(DType::u8, {batch, capacity}, mask.data());
  std::vector<unsigned char> zeros(kc.size() * dtype_size(t), 0);
  DeviceTensor d_k(t, {batch, capacity, ng * hn}, zeros.data()), d_v(t, {batch, capacity, ng * hn}, zeros.data());
  DeviceTensor d_out(t, {seq, batch, na * hn}, nullptr);
  const size_t esize = dtype_size(t);
  auto gpu_call = [&](int64_t s0, int64_t n) {
    Tensor q(static_cast<char*>(d_qkv.tensor.data()) + s0 * row * esize, t, {n, batch, width}, Device::cuda(0));
    Tensor o(static_cast<char*>(d_out.tensor.data()) + s0 * out_row * esize, t, {n, batch, na * hn}, Device::cuda(0));
    ops::cached_attention_forward(q, d_mask.tensor, p, d_k.tensor, d_v.tensor, s0, o);
  };
  gpu_call(0, prefill);
  for (int64_t s = prefill; s < seq; ++s) gpu_call(s, 1);
  const double tolerance = t == DType::f32 ? 1e-5 : 2e-2;
  const auto e_out = normalised_error(download_checked(d_out, std::string(name) + " out", failures), out, t);
  const auto e_k = normalised_error(download_checked(d_k, std::string(name) + " k_cache", failures), kc, t);
  const auto e_v = normalised_error(download_checked(d_v, std::string(name) + " v_cache", failures), vc, t);
  const bool ok = e_out.error <= tolerance && e_k.error <= tolerance && e_v.error <= tolerance &&
                  e_out.special_mismatches + e_k.special_mismatches + e_v.special_mismatches == 0;
  std::printf("%s cached_attention %s %s: out %.2e, caches %.2e %.2e (tolerance %.0e)\n", ok ? "PASS" : "FAIL", name,
              std::string(dtype_name(t)).c_str(), e_out.error, e_k.error, e_v.error, tolerance);
  if (!ok) ++failures;
}

void argmax_case(DType t) {
  std::mt19937 rng(5);
  const int64_t rows = 5, cols = 50304, valid = 50257;
  std::vector<float> logits = random_normal(rng, rows * cols, 3.0f, t);
  for (int64_t r = 0; r < rows; ++r) logits[r * cols + valid + 3] = 1000.0f;  // padding columns must be ignored
  logits[2 * cols + 17] = logits[2 * cols + 40000] = 50.0f;                   // a tie: the first wins
  std::vector<int32_t> index(rows);
  std::vector<float> logprob(rows);
  ops::argmax_log_softmax(Tensor(logits.data(), DType::f32, {rows, cols}), valid,
                          Tensor(index.data(), DType::i32, {rows}), Tensor(logprob.data(), DType::f32, {rows}));
  const auto bytes = to_bytes(logits, t);
  DeviceTensor d_logits(t, {rows, cols}, bytes.data()), d_index(DType::i32, {rows}, nullptr),
      d_logprob(DType::f32, {rows}, nullptr);
  ops::argmax_log_softmax(d_logits.tensor, valid, d_index.tensor, d_logprob.tensor);
  const auto g_logprob = download_checked(d_logprob, "argmax logprob", failures);
  std::vector<int32_t> g_index(rows);
  cuda_ok(cudaMemcpy(g_index.data(), d_index.tensor.data(), rows * 4, cudaMemcpyDeviceToHost), "index download");
  bool ok = index[2] == 17;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    ok = ok && g_index[r] == index[r];
    worst = std::max(worst, std::fabs(double(g_logprob[r]) - logprob[r]));
  }
  ok = ok && worst < 1e-3;
  std::printf("%s argmax_log_softmax %s: indices %s, max |logprob diff| %.2e\n", ok ? "PASS" : "FAIL",
              std::string(dtype_name(t)).c_str(),
              ok ? "equal" : "differ", worst);
  if (!ok) ++failures;
}
// The fused decode linear (ops/decode_linear.h: LayerNorm? -> linear + bias -> GeLU / residual add)
// on the GPU in dtype t against the same op on the CPU in f32 (the separate ops); the GPU case must
// take the fused kernel (decode_linear_fuses).
void decode_linear_case(const char* name, DType t, int64_t rows, int64_t k_in, int64_t n_out, bool layernorm,
                        ops::DecodeEpilogue epilogue, bool bias = true) {
  std::mt19937 rng(static_cast<unsigned>(rows * 131 + k_in + n_out));
  const auto in = random_normal(rng, rows * k_in, 1.0f, t, 0.3f);
  const auto weight = random_normal(rng, n_out * k_in, 1.0f / std::sqrt(float(k_in)), t);
  const auto b = random_normal(rng, n_out, 0.5f, t);
  const auto gamma = random_normal(rng, k_in, 0.2f, t, 1.0f), beta = random_normal(rng, k_in, 0.2f, t);
  const auto residual = random_normal(rng, rows * n_out, 1.0f, t);
  auto host = [](const std::vector<float>& v, Shape s) { return Tensor(const_cast<float*>(v.data()), DType::f32, s); };
  const bool with_residual = epilogue == ops::DecodeEpilogue::residual_add;
  ops::DecodeLinear d;
  d.weight = host(weight, {n_out, k_in});
  if (bias) d.bias = host(b, {n_out});
  if (layernorm) d.ln_weight = host(gamma, {k_in}), d.ln_bias = host(beta, {k_in});
  d.epilogue = epilogue;
  if (with_residual) d.residual = host(residual, {rows, n_out});
  std::vector<float> ref(static_cast<size_t>(rows * n_out));
  Arena cpu_arena(size_t(8) << 20, Device::cpu());
  ops::decode_linear_forward(cpu_arena, host(in, {rows, k_in}), d, Tensor(ref.data(), DType::f32, {rows, n_out}));
  const auto in_b = to_bytes(in, t), w_b = to_bytes(weight, t), b_b = to_bytes(b, t), g_b = to_bytes(gamma, t),
             be_b = to_bytes(beta, t), r_b = to_bytes(residual, t);
  DeviceTensor d_in(t, {rows, k_in}, in_b.data()), d_w(t, {n_out, k_in}, w_b.data()), d_b(t, {n_out}, b_b.data()),
      d_g(t, {k_in}, g_b.data()), d_be(t, {k_in}, be_b.data()), d_r(t, {rows, n_out}, r_b.data()),
      d_out(t, {rows, n_out}, nullptr);
  ops::DecodeLinear g;
  g.weight = d_w.tensor;
  if (bias) g.bias = d_b.tensor;
  if (layernorm) g.ln_weight = d_g.tensor, g.ln_bias = d_be.tensor;
  g.epilogue = epilogue;
  if (with_residual) g.residual = d_r.tensor;
  const bool fused = ops::decode_linear_fuses(d_in.tensor, g, d_out.tensor);
  Arena gpu_arena(size_t(8) << 20, Device::cuda(0));
  ops::decode_linear_forward(gpu_arena, d_in.tensor, g, d_out.tensor);
  const auto e = normalised_error(download_checked(d_out, std::string(name) + " out", failures), ref, t);
  const double tolerance = 2e-2;
  const bool ok = fused && e.error <= tolerance && e.special_mismatches == 0;
  std::printf("%s decode_linear %s %s rows %lld [%lld -> %lld]: %s, error %.2e (tolerance %.0e)\n", ok ? "PASS" : "FAIL",
              name, std::string(dtype_name(t)).c_str(), static_cast<long long>(rows), static_cast<long long>(k_in),
              static_cast<long long>(n_out), fused ? "fused kernel" : "NOT fused", e.error, tolerance);
  if (!ok) ++failures;
}

// A small decoder of `kind` (rope: Llama-style; alibi: GPT-2 with ALiBi), dropout off.
train::ModelConfig small_model(const std::string& kind) {
  train::ModelConfig m = train::load_config("", {"data.mock_data=true", "data.vocab_size=64"}).model;
  m.num_layers = 2;
  m.hidden_size = 128;
  m.num_attention_heads = 4;
  m.num_query_groups = 4;
  m.ffn_hidden_size = 256;
  m.seq_length = 160;
  m.max_position_embeddings = 160;
  m.hidden_dropout = m.attention_dropout = 0.0;
  if (kind == "rope") {
    m.position_embedding_type = "rope";
    m.normalization = "rmsnorm";
    m.activation = "swiglu";
    m.num_query_groups = 2;
    m.add_bias_linear = false;
    m.untie_embeddings_and_output_weights = true;
  } else if (kind == "alibi") {
    m.position_embedding_type = "alibi";
  }  // "gpt": GPT-2 (learned positions, LayerNorm, GeLU): bf16 steps take the fused decode layer
  return m;
}

// Logits (last token per row, f32 on the host) of a prefill of `prefill` tokens and then `steps` cached
// single-token steps of a left-padded batch: row b has b padding tokens; positions count from each
// row's first token.
std::vector<float> decode_logits(const train::ModelConfig& config, DType dtype, Device device, int64_t rows,
                                 int64_t prefill, int64_t steps) {
  const int64_t vocab = 64, capacity = prefill + steps;
  models::GPTModel model(config, vocab, dtype, device);
  model.initialize(1234);
  Arena cache_arena(size_t(16) << 20, device), step_arena(size_t(64) << 20, device);
  models::GPTKvCache cache = model.allocate_kv_cache(cache_arena, rows, capacity);
  std::mt19937 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(capacity * rows)), positions(ids.size(), 0);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * capacity), 0);
  for (int64_t s = 0; s < capacity; ++s)
    for (int64_t b = 0; b < rows; ++b) {
      ids[s * rows + b] = static_cast<int32_t>(rng() % vocab);
      if (s >= b) {
        positions[s * rows + b] = static_cast<int32_t>(s - b);
        mask[b * capacity + s] = 1;
      }
    }
  auto to_device = [&](void* host, DType t, Shape shape) {
    Tensor out = step_arena.allocate(t, shape);
    ops::copy(Tensor(host, t, shape), out);
    return out;
  };
  std::vector<float> all;
  for (int64_t past = 0; past < capacity; past += past == 0 ? prefill : 1) {
    const int64_t t = past == 0 ? prefill : 1;
    step_arena.reset();
    Tensor ids_t = to_device(ids.data() + past * rows, DType::i32, {t * rows});
    Tensor pos_t = to_device(positions.data() + past * rows, DType::i32, {t * rows});
    Tensor mask_t = to_device(mask.data(), DType::u8, {rows, capacity});
    if (cache.past_device.data()) {
      int32_t host_past = static_cast<int32_t>(past);
      ops::copy(Tensor(&host_past, DType::i32, {1}), cache.past_device);
    }
    Tensor logits = model.forward_cached(0, step_arena, ids_t, pos_t, Tensor(), mask_t, cache, past, t, true);
    Tensor f32 = step_arena.allocate(DType::f32, logits.shape());
    ops::copy(logits, f32);
    std::vector<float> host(static_cast<size_t>(f32.numel()));
    ops::copy(f32, Tensor(host.data(), DType::f32, f32.shape()));
    ops::synchronize(device);
    all.insert(all.end(), host.begin(), host.end());
  }
  return all;
}

void model_case(const std::string& kind, DType t) {
  const train::ModelConfig config = small_model(kind);
  const int64_t rows = 3, prefill = 100, steps = 4;  // few (row, head) pairs: the steps run the whole-head kernel
  const std::vector<float> ref = decode_logits(config, DType::f32, Device::cpu(), rows, prefill, steps);
  const std::vector<float> got = decode_logits(config, t, Device::cuda(0), rows, prefill, steps);
  const auto e = normalised_error(got, ref, DType::f32);
  const double tolerance = t == DType::f32 ? 1e-4 : 5e-2;
  const bool ok = got.size() == ref.size() && e.error <= tolerance && e.special_mismatches == 0;
  std::printf("%s forward_cached %s model %s: logits of prefill + %lld cached steps %.2e (tolerance %.0e)\n",
              ok ? "PASS" : "FAIL", kind.c_str(), std::string(dtype_name(t)).c_str(), static_cast<long long>(steps),
              e.error, tolerance);
  if (!ok) ++failures;
}
}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each case's line reaches a redirected stdout before the next runs
  if (!gpu_test::device_visible()) return 77;
  using E = ops::DecodeEpilogue;
  for (int64_t rows : {1, 3, 8}) {  // the GPT-2 1.5B block's four linears
    decode_linear_case("ln1+qkv", DType::bf16, rows, 1600, 4800, true, E::none);
    decode_linear_case("proj+residual", DType::bf16, rows, 1600, 1600, false, E::residual_add);
    decode_linear_case("ln2+fc1+gelu", DType::bf16, rows, 1600, 6400, true, E::gelu_tanh);
    decode_linear_case("fc2+residual", DType::bf16, rows, 6400, 1600, false, E::residual_add);
  }
  decode_linear_case("ln+fc1+gelu-124m", DType::bf16, 2, 768, 3072, true, E::gelu_tanh);
  decode_linear_case("ln+gelu-erf-f16", DType::f16, 4, 256, 96, true, E::gelu_erf);
  decode_linear_case("no-bias-f16", DType::f16, 5, 512, 77, false, E::none, false);
  decode_linear_case("long-row-two-passes", DType::bf16, 2, 20480, 64, false, E::residual_add);
  decode_linear_case("ln-no-bias", DType::bf16, 7, 1024, 300, true, E::none, false);
  for (DType t : {DType::f32, DType::bf16}) {
    cached_attention_case("small-gqa", t, 3, 4, 2, 64, 5, 4);
    cached_attention_case("hn8", t, 2, 4, 4, 8, 6, 3);
    cached_attention_case("gpt2-124m-b32", t, 32, 12, 12, 64, 128, 3);
    cached_attention_case("hn128", t, 2, 8, 8, 128, 40, 2);
    cached_attention_case("hn96-scalar-path", t, 2, 4, 2, 96, 40, 2);  // bf16: 12 vector lanes, not a power of two
    cached_attention_case("b1-300", t, 1, 12, 12, 64, 300, 3);
    cached_attention_case("b1-900-several-chunks", t, 1, 12, 12, 64, 900, 3);  // bf16: 384 keys a chunk
    cached_attention_case("gqa-b2-hn128", t, 2, 8, 2, 128, 200, 3);
    cached_attention_case("alibi", t, 3, 4, 2, 64, 5, 4, 4, 0);
    cached_attention_case("alibi-tp-slice-b1", t, 1, 6, 6, 64, 150, 3, 12, 6);
    argmax_case(t);
    model_case("rope", t);
    model_case("alibi", t);
    model_case("gpt", t);
  }
  std::printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
