// Tensor- and sequence-parallel parity test (run under mpirun, label mpi): every rank trains the
// same small GPT with TP = world size (with and without sequence parallelism) and, in the same
// process, the TP = 1 reference; the losses of every iteration, the gathered gradients after step
// 1 and the initial gathered weights must match. Modes:
//   parity    2 layers, hidden 64, 4 heads, seq 32, vocab 1000 (padded per TP size), 20 iterations,
//             dropout 0; then 3 iterations with hidden dropout 0.1 (attention dropout 0)
//   vocab     vocabulary 50257 split over the TP ranks (padded to 50688 with TP = 4): loss and grads
//   mappings  the conjugate communication mappings on known tensors
//   mixed     bf16 (with and without SP) and fp16 models at TP = world size, trained through the
//             mixed-precision DistributedOptimizer (f32 main params): lm_loss of each of 10
//             iterations within 2% of the fp32 TP = 1 run
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/models/gpt.h"
#include "tessera/models/vocab.h"
#include "tessera/ops/elementwise.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/optim/grad_clip.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/distributed/tp_grads.h"
#include "tessera/tensor_parallel/tp_mappings.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"

using namespace tessera;

namespace {

int g_failures = 0;
bool is_root() { return Runtime::get().world_rank() == 0; }

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "FAIL [rank %d] %s\n", Runtime::get().world_rank(), what.c_str());
  }
}

train::ModelConfig small_model(int64_t layers, int64_t hidden, int64_t heads, int64_t seq, double hidden_dropout) {
  train::ModelConfig m = train::load_config("", {"data.mock_data=true", "data.vocab_size=8"}).model;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.seq_length = seq;
  m.max_position_embeddings = seq;
  m.hidden_dropout = hidden_dropout;
  m.attention_dropout = 0.0;
  m.make_vocab_size_divisible_by = 8;
  return m;
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<double>> initial_values, step1_grads;  // gathered global tensors per parameter
  std::vector<std::string> names;
};

struct RunSpec {
  train::ModelConfig model;
  int64_t vocab = 1000, batch = 2, micro_batches = 2, iterations = 20;
  uint64_t seed = 1234;
};

// Tokens i32 [b, s+1] and a loss mask with ~10% zeros, both from fixed streams: micro-batch m
// is the same every iteration, so the model can memorise it and the loss falls.
void fill_batch(const RunSpec& spec, int64_t micro, const Tensor& tokens, const Tensor& mask) {
  RandomStream ids(spec.seed, mix_stream(stream_id("tp_parity_tokens"), static_cast<uint64_t>(micro)));
  int32_t* t = tokens.data_as<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i)
    t[i] = static_cast<int32_t>(ids.below(static_cast<uint64_t>(i), static_cast<uint64_t>(spec.vocab)));
  float* m = mask.data_as<float>();
  for (int64_t i = 0; i < mask.numel(); ++i) m[i] = ids.uniform(static_cast<uint64_t>(1000000 + i)) < 0.1f ? 0.f : 1.f;
}

RunResult train_run(const RunSpec& spec, const parallel::TensorParallel& tp) {
  models::GPTModel model(spec.model, spec.vocab, DType::f32, Device::cpu(), {models::GPTChunkLayout{}}, tp);
  model.initialize(spec.seed);
  auto& store = model.parameters();
  RunResult result;
  for (const auto& p : store.parameters()) {
    result.names.push_back(p.name);
    result.initial_values.push_back(parallel::gather_global(p, p.value, tp));
  }
  std::vector<optim::ParamEntry> entries;
  for (const auto& p : store.parameters())
    entries.push_back({p.name, p.value, p.grad, optim::default_weight_decay(p.name, p.shape)});
  optim::AdamWOptimizer optimizer(std::move(entries));
  Arena arena(size_t(32) << 20);
  int64_t s = spec.model.seq_length;
  Buffer token_buffer(static_cast<size_t>(spec.batch * (s + 1)) * sizeof(int32_t));
  Buffer mask_buffer(static_cast<size_t>(spec.batch * s) * sizeof(float));
  Tensor tokens = token_buffer.as_tensor(DType::i32, {spec.batch, s + 1});
  Tensor mask = mask_buffer.as_tensor(DType::f32, {spec.batch, s});
  for (int64_t it = 1; it <= spec.iterations; ++it) {
    store.zero_grads();
    double loss = 0;
    for (int64_t mb = 0; mb < spec.micro_batches; ++mb) {
      fill_batch(spec, mb, tokens, mask);
      nn::DropoutContext dropout{spec.seed, mix_stream(static_cast<uint64_t>(it), static_cast<uint64_t>(mb)), true};
      models::LossSum l =
          model.forward_backward(arena, tokens, mask, 1.0 / static_cast<double>(spec.micro_batches), dropout);
      arena.reset();
      loss += l.loss_sum.value() / l.denominator / static_cast<double>(spec.micro_batches);
    }
    parallel::all_reduce_sequence_parallel_grads(store, tp);
    if (it == 1)
      for (const auto& p : store.parameters()) result.step1_grads.push_back(parallel::gather_global(p, p.grad, tp));
    double norm = optim::finish_grad_norm(parallel::tensor_parallel_grad_sum_of_squares(store, tp));
    std::vector<Tensor> grads;
    for (const auto& p : store.parameters()) grads.push_back(p.grad);
    optim::scale_grads(grads, optim::clip_coefficient(norm, 1.0));
    optimizer.step(1e-3, 0.01, 0.9, 0.95, 1e-8);
    result.losses.push_back(loss);
    result.grad_norms.push_back(norm);
  }
  return result;
}

// max |a - b| / max |b| over the first b.size() elements (the TP=1 reference's; a may hold more
// vocabulary padding rows, which must be exactly zero in grads and are checked by the caller).
double tensor_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

struct Comparison {
  double max_loss_rel = 0, max_grad_rel = 0, max_norm_rel = 0, max_init_diff = 0;
};

Comparison compare(const RunResult& tp, const RunResult& ref, const std::string& label, double tolerance) {
  Comparison c;
  expect(tp.losses.size() == ref.losses.size() && tp.names == ref.names, label + ": runs differ in shape");
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    double rel = std::abs(tp.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]);
    c.max_loss_rel = std::max(c.max_loss_rel, rel);
    c.max_norm_rel = std::max(c.max_norm_rel, std::abs(tp.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i]);
    if (!(rel <= tolerance))
      expect(false, label + ": iteration " + std::to_string(i + 1) + " lm_loss " + std::to_string(tp.losses[i]) +
                        " vs TP=1 " + std::to_string(ref.losses[i]) + " (relative " + std::to_string(rel) + ")");
  }
  for (size_t p = 0; p < ref.names.size() && p < tp.names.size(); ++p) {
    const auto& a = tp.step1_grads[p];
    const auto& b = ref.step1_grads[p];
    expect(a.size() >= b.size(), label + ": " + ref.names[p] + " gathered smaller than TP=1");
    if (a.size() < b.size()) continue;
    double rel = tensor_rel_diff(a, b);
    c.max_grad_rel = std::max(c.max_grad_rel, rel);
    if (!(rel <= tolerance))
      expect(false, label + ": step-1 grad of " + ref.names[p] + " relative difference " + std::to_string(rel));
    for (size_t i = b.size(); i < a.size(); ++i)
      if (a[i] != 0.0) {
        expect(false, label + ": padded vocabulary row of " + ref.names[p] + " has a nonzero gradient");
        break;
      }
    const auto& va = tp.initial_values[p];
    const auto& vb = ref.initial_values[p];
    for (size_t i = 0; i < vb.size(); ++i) c.max_init_diff = std::max(c.max_init_diff, std::abs(va[i] - vb[i]));
  }
  expect(c.max_init_diff == 0.0, label + ": initial global weights differ from TP=1 (max diff " +
                                     std::to_string(c.max_init_diff) + ")");
  if (is_root())
    std::printf("%s: max rel diff lm_loss %.3e, step-1 grads %.3e, grad norm %.3e, initial weights %.1e\n",
                label.c_str(), c.max_loss_rel, c.max_grad_rel, c.max_norm_rel, c.max_init_diff);
  return c;
}

parallel::TensorParallel tp_view(parallel::ParallelContext& ctx, bool sequence_parallel) {
  parallel::TensorParallel tp = parallel::tensor_parallel_view(ctx);
  tp.sequence_parallel = sequence_parallel;
  return tp;
}

std::unique_ptr<parallel::ParallelContext> make_context(int tp_size) {
  Runtime& rt = Runtime::get();
  train::ParallelConfig p{};
  p.tensor_model_parallel_size = tp_size;
  p.pipeline_model_parallel_size = 1;
  p.expert_model_parallel_size = 1;
  p.sequence_parallel = false;
  return std::make_unique<parallel::ParallelContext>(p, rt.world_size(), rt.world_rank(), Device::cpu());
}

void parity() {
  int tp_size = Runtime::get().world_size();
  auto ctx = make_context(tp_size);
  RunSpec spec;
  spec.model = small_model(2, 64, 4, 32, 0.0);
  RunResult ref = train_run(spec, parallel::TensorParallel{});
  if (is_root())
    std::printf("TP=1 lm_loss: iteration 1 %.6f, iteration %lld %.6f (padded vocab %lld; TP=%d pads to %lld)\n",
                ref.losses.front(), static_cast<long long>(spec.iterations), ref.losses.back(),
                static_cast<long long>(models::padded_vocab_size(spec.vocab, 8)), tp_size,
                static_cast<long long>(models::padded_vocab_size(spec.vocab, 8, tp_size)));
  expect(ref.losses.back() < ref.losses.front() - 0.1, "TP=1 reference does not learn");
  for (bool sp : {false, true}) {
    std::string label = "TP=" + std::to_string(tp_size) + (sp ? " SP" : " no-SP") + " dropout 0";
    compare(train_run(spec, tp_view(*ctx, sp)), ref, label, 1e-5);
  }
  // Hidden dropout: replicated regions draw the same mask on every rank, SP regions by global
  // index, so both layouts reproduce TP=1's masks (attention dropout stays 0: its masks differ).
  RunSpec drop = spec;
  drop.model = small_model(2, 64, 4, 32, 0.1);
  drop.iterations = 3;
  RunResult drop_ref = train_run(drop, parallel::TensorParallel{});
  expect(drop_ref.losses[0] != ref.losses[0], "hidden dropout 0.1 did not change the loss");
  for (bool sp : {false, true}) {
    std::string label = "TP=" + std::to_string(tp_size) + (sp ? " SP" : " no-SP") + " hidden dropout 0.1";
    compare(train_run(drop, tp_view(*ctx, sp)), drop_ref, label, 1e-5);
  }
}

// The parity training loop with a bf16 / f16 model at TP = ctx's TP size, stepped by the
// mixed-precision DistributedOptimizer (f32 main params; fp16 with dynamic loss scaling).
std::vector<double> train_run_mixed(const RunSpec& spec, parallel::ParallelContext& ctx, bool sequence_parallel,
                                    DType dtype, int& skipped_steps) {
  parallel::TensorParallel tp = tp_view(ctx, sequence_parallel);
  models::GPTModel model(spec.model, spec.vocab, dtype, Device::cpu(), {models::GPTChunkLayout{}}, tp);
  auto& store = model.parameters();
  store.initialize(spec.seed);
  optim::DistributedOptimizerOptions options;
  options.dynamic_loss_scaling = dtype == DType::f16;
  options.scaler.initial_scale = 1024.0;
  std::vector<bool> weight_decay;
  for (const auto& p : store.parameters()) weight_decay.push_back(optim::default_weight_decay(p.name, p.shape));
  optim::DistributedOptimizer optimizer(store, ctx, options, std::move(weight_decay),
                                        optim::grad_norm_counted_params(store, tp.size, tp.rank));
  Arena arena(size_t(32) << 20);
  int64_t s = spec.model.seq_length;
  Buffer token_buffer(static_cast<size_t>(spec.batch * (s + 1)) * sizeof(int32_t));
  Buffer mask_buffer(static_cast<size_t>(spec.batch * s) * sizeof(float));
  Tensor tokens = token_buffer.as_tensor(DType::i32, {spec.batch, s + 1});
  Tensor mask = mask_buffer.as_tensor(DType::f32, {spec.batch, s});
  std::vector<double> losses;
  skipped_steps = 0;
  for (int64_t it = 1; it <= spec.iterations; ++it) {
    store.zero_grads();
    double loss = 0;
    for (int64_t mb = 0; mb < spec.micro_batches; ++mb) {
      fill_batch(spec, mb, tokens, mask);
      nn::DropoutContext dropout{spec.seed, mix_stream(static_cast<uint64_t>(it), static_cast<uint64_t>(mb)), true};
      models::LossSum l = model.forward_backward(
          arena, tokens, mask, optimizer.loss_scale() / static_cast<double>(spec.micro_batches), dropout);
      arena.reset();
      loss += l.loss_sum.value() / l.denominator / static_cast<double>(spec.micro_batches);
    }
    parallel::all_reduce_sequence_parallel_grads(store, tp);
    optim::OptimizerStepResult r = optimizer.step(1e-3, 0.01, 0.9, 0.95, 1e-8, 1.0);
    if (r.skipped) ++skipped_steps;
    losses.push_back(loss);
  }
  return losses;
}

void mixed() {
  int tp_size = Runtime::get().world_size();
  auto ctx = make_context(tp_size);
  RunSpec spec;
  spec.model = small_model(2, 64, 4, 32, 0.0);
  spec.iterations = 10;
  RunResult ref = train_run(spec, parallel::TensorParallel{});
  expect(ref.losses.back() < ref.losses.front() - 0.1, "fp32 TP=1 reference does not learn");
  struct Case {
    DType dtype;
    bool sp;
  };
  for (Case c : {Case{DType::bf16, false}, Case{DType::bf16, true}, Case{DType::f16, false}}) {
    std::string label = std::string(dtype_name(c.dtype)) + " TP=" + std::to_string(tp_size) + (c.sp ? " SP" : " no-SP");
    int skipped = 0;
    std::vector<double> losses = train_run_mixed(spec, *ctx, c.sp, c.dtype, skipped);
    double max_rel = 0;
    for (size_t i = 0; i < ref.losses.size(); ++i) {
      double rel = std::abs(losses[i] - ref.losses[i]) / std::abs(ref.losses[i]);
      max_rel = std::max(max_rel, rel);
      if (!(rel <= 0.02))
        expect(false, label + ": iteration " + std::to_string(i + 1) + " lm_loss " + std::to_string(losses[i]) +
                          " vs fp32 TP=1 " + std::to_string(ref.losses[i]) + " (relative " + std::to_string(rel) + ")");
    }
    // Half storage must actually round something: bitwise-equal losses would mean an f32 run.
    expect(max_rel > 0, label + ": losses identical to fp32, the model did not run in " +
                            std::string(dtype_name(c.dtype)));
    expect(skipped == 0, label + ": " + std::to_string(skipped) + " steps skipped on gradient overflow");
    if (is_root())
      std::printf("%s vs fp32 TP=1 over %lld iterations: max rel diff lm_loss %.3e (iteration 1 %.6f vs %.6f, "
                  "last %.6f vs %.6f), %d skipped steps\n",
                  label.c_str(), static_cast<long long>(spec.iterations), max_rel, losses.front(), ref.losses.front(),
                  losses.back(), ref.losses.back(), skipped);
  }
}

void vocab() {
  int tp_size = Runtime::get().world_size();
  auto ctx = make_context(tp_size);
  RunSpec spec;
  spec.vocab = 50257;
  spec.model = small_model(1, 16, 4, 8, 0.0);
  spec.model.make_vocab_size_divisible_by = 128;
  spec.batch = 2;
  spec.micro_batches = 1;
  spec.iterations = 2;
  int64_t padded = models::padded_vocab_size(spec.vocab, 128, tp_size);
  if (tp_size == 4) expect(padded == 50688, "50257 at TP=4 pads to " + std::to_string(padded) + ", want 50688");
  expect(padded % (128 * tp_size) == 0 && padded >= spec.vocab, "padded vocabulary not a multiple of 128 x tp");
  RunResult ref = train_run(spec, parallel::TensorParallel{});
  for (bool sp : {false, true}) {
    parallel::TensorParallel tp = tp_view(*ctx, sp);
    models::GPTModel model(spec.model, spec.vocab, DType::f32, Device::cpu(), {models::GPTChunkLayout{}}, tp);
    const auto& word = model.parameters().find("embedding.word_embeddings.weight");
    expect(word.shape[0] == padded / tp_size && word.global_shape[0] == padded && word.split_axis == 0 &&
               word.split_offset == tp.rank * (padded / tp_size),
           "word embedding shard metadata");
    std::string label = "vocab 50257 TP=" + std::to_string(tp_size) + (sp ? " SP" : " no-SP");
    compare(train_run(spec, tp), ref, label, 1e-5);
  }
}

std::vector<float> iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

bool equal(const Tensor& t, const std::vector<float>& want) {
  if (t.numel() != static_cast<int64_t>(want.size())) return false;
  return std::equal(want.begin(), want.end(), t.data_as<float>());
}

void mappings() {
  int tp_size = Runtime::get().world_size();
  auto ctx = make_context(tp_size);
  parallel::TensorParallel tp = parallel::tensor_parallel_view(*ctx);
  int r = tp.rank;
  Arena arena(size_t(1) << 20);
  int64_t n = 4 * tp_size, k = 3 * tp_size;
  // A replicated [n, k] tensor: element (i, j) = i * k + j.
  std::vector<float> full = iota(n * k, 0.f);
  Tensor x(full.data(), DType::f32, {n, k});
  // Last-dim split and gather are inverse; their backwards are the conjugates.
  Tensor cols = parallel::scatter_to_tp_last_dim_forward(arena, x, tp);
  std::vector<float> want_cols;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k / tp_size; ++j) want_cols.push_back(full[static_cast<size_t>(i * k + r * (k / tp_size) + j)]);
  expect(equal(cols, want_cols), "scatter_to_tp_last_dim forward keeps this rank's columns");
  expect(equal(parallel::gather_from_tp_last_dim_forward(arena, cols, tp), full), "gather_from_tp_last_dim forward");
  expect(equal(parallel::scatter_to_tp_last_dim_backward(arena, cols, tp), full), "scatter_to_tp_last_dim backward");
  expect(equal(parallel::gather_from_tp_last_dim_backward(arena, x, tp), want_cols), "gather_from_tp_last_dim backward");
  // Rows (sequence parallelism).
  std::vector<float> want_rows(full.begin() + r * (n / tp_size) * k, full.begin() + (r + 1) * (n / tp_size) * k);
  Tensor rows = parallel::scatter_to_sp_forward(arena, x, tp);
  expect(equal(rows, want_rows), "scatter_to_sp forward keeps this rank's rows");
  expect(equal(parallel::scatter_to_sp_backward(arena, rows, tp), full), "scatter_to_sp backward all-gathers");
  expect(equal(parallel::gather_from_sp_forward(arena, rows, tp), full), "gather_from_sp forward all-gathers");
  std::vector<float> times_tp(want_rows);
  for (auto& v : times_tp) v *= static_cast<float>(tp_size);
  expect(equal(parallel::gather_from_sp_backward(arena, x, tp), times_tp), "gather_from_sp backward reduce-scatters");
  expect(equal(parallel::reduce_scatter_to_sp_forward(arena, x, tp), times_tp), "reduce_scatter_to_sp forward");
  expect(equal(parallel::reduce_scatter_to_sp_backward(arena, rows, tp), full), "reduce_scatter_to_sp backward");
  // f and g: a per-rank tensor (rank r holds r + 1 everywhere) is summed by the all-reduce side.
  std::vector<float> mine(static_cast<size_t>(n * k), static_cast<float>(r + 1));
  std::vector<float> summed(mine.size(), static_cast<float>(tp_size * (tp_size + 1) / 2));
  Tensor m(mine.data(), DType::f32, {n, k});
  expect(equal(parallel::copy_to_tp_forward(m, tp), mine), "copy_to_tp forward is the identity");
  expect(equal(parallel::copy_to_tp_backward(arena, m, tp), summed), "copy_to_tp backward all-reduces");
  expect(equal(parallel::reduce_from_tp_forward(arena, m, tp), summed), "reduce_from_tp forward all-reduces");
  expect(equal(parallel::reduce_from_tp_backward(m, tp), mine), "reduce_from_tp backward is the identity");
  if (is_root()) std::printf("mappings checked on %d TP ranks\n", tp_size);
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "parity";
    Runtime& rt = Runtime::get();
    if (mode == "parity") parity();
    else if (mode == "vocab") vocab();
    else if (mode == "mappings") mappings();
    else if (mode == "mixed") mixed();
    else TESSERA_CONFIG_FAIL("unknown mode \"", mode, "\"; use parity, vocab, mappings or mixed");
    int total = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rt.world_rank() == 0)
      std::printf("%s on %d ranks: %s (%d failures)\n", mode.c_str(), rt.world_size(), total ? "FAILED" : "passed",
                  total);
    return total == 0 ? 0 : 1;
  });
}
