// Pipeline-parallel tests (run under mpirun, label mpi). Modes:
//   train OUT [key=value...]    run tessera's Trainer on a tiny mock-data GPT; the output rank writes
//                               every iteration's lm_loss and the last eval loss to OUT
//   compare REF [key=value...]  run it (e.g. with a pipeline layout) and require every loss within
//                               1e-5 of REF (a single-rank run of the same config)
//   schedule                    (4 ranks) the executed order of forward, backward, send and receive
//                               on each stage against an independent model of 1F1B and interleaved
//                               1F1B for pp = 4, m = 8; peak in-flight micro-batches = pp - rank;
//                               incompatible micro-batch counts and layer splits are ConfigErrors
//   shapes M [V]                 (any ranks = pp) M micro-batches (V chunks per stage) through the
//                               pipeline: losses and every gradient equal a whole-model run, no deadlock
#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/pipeline/forward_backward.h"
#include "tessera/pipeline/pipeline_layout.h"
#include "tessera/pipeline/pipeline_training.h"
#include "tessera/pipeline/schedule_interleaved.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

using namespace tessera;

namespace {

int failures = 0;
#define EXPECT(cond, ...)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      ++failures;                                                                  \
      std::fprintf(stderr, "[rank %d] FAIL %s:%d: %s\n", Runtime::get().world_rank(), __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
    }                                                                              \
  } while (0)

std::vector<std::string> tiny_overrides() {
  return {"model.num_layers=8",        "model.hidden_size=32",        "model.num_attention_heads=4",
          "model.seq_length=16",       "model.max_position_embeddings=16", "model.hidden_dropout=0.1",
          "model.attention_dropout=0.1", "model.make_vocab_size_divisible_by=32",
          "training.micro_batch_size=2", "training.global_batch_size=16", "training.train_iters=20",
          "training.eval_interval=10", "training.eval_iters=2", "training.device=\"cpu\"",
          "optimizer.lr=3.0e-3",        "optimizer.lr_warmup_iters=2", "data.mock_data=true",
          "data.vocab_size=90",         "logging.log_interval=5"};
}

std::vector<std::string> with(std::vector<std::string> base, int first, int argc, char** argv) {
  for (int i = first; i < argc; ++i) base.push_back(argv[i]);
  return base;
}

// --- train / compare: the Trainer end to end ---------------------------------------------------

std::vector<double> train_losses(const std::vector<std::string>& overrides) {
  train::Config config = train::load_config("", overrides);
  train::Trainer trainer(config, Device::cpu());
  train::TrainingSummary summary = trainer.train();
  std::vector<double> out = summary.lm_loss;
  out.push_back(summary.last_eval_loss);
  return out;
}

// The single-rank reference the layouts are compared with: it must train (20 finite lm_loss values
// going down, a finite eval loss), or the parity tests would compare against garbage.
int train_mode(const std::string& out_path, const std::vector<std::string>& overrides) {
  std::vector<double> losses = train_losses(overrides);
  EXPECT(losses.size() == 21, "the reference run gave %zu values (20 lm_loss + eval expected)", losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT(std::isfinite(losses[i]), "reference %s %zu is %f", i + 1 < losses.size() ? "iteration" : "eval loss", i + 1,
           losses[i]);
  EXPECT(losses.size() > 2 && losses[losses.size() - 2] < losses[0], "reference lm_loss did not decrease");
  if (failures) return 1;
  if (log::is_output_rank()) {
    std::ofstream out(out_path);
    out.precision(17);
    for (double l : losses) out << l << "\n";
    TESSERA_CHECK(out.good(), "cannot write ", out_path);
  }
  return 0;
}

int compare_mode(const std::string& ref_path, const std::vector<std::string>& overrides) {
  std::vector<double> losses = train_losses(overrides);
  // Every stage got the last stage's losses (value_from_last_stage): check on every rank.
  std::ifstream in(ref_path);
  std::vector<double> ref;
  for (double v; in >> v;) ref.push_back(v);
  EXPECT(ref.size() == losses.size() && ref.size() == 21, "reference %s has %zu values, run %zu", ref_path.c_str(),
         ref.size(), losses.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(ref.size(), losses.size()); ++i) {
    double d = std::fabs(ref[i] - losses[i]);
    worst = std::max(worst, std::isnan(d) ? 1e30 : d);
    EXPECT(d <= 1e-5, "%s %zu: %.9f vs single-rank %.9f", i + 1 < ref.size() ? "iteration" : "eval loss", i + 1,
           losses[i], ref[i]);
  }
  if (log::is_output_rank())
    std::printf("parity: %zu losses (20 lm_loss + eval), max |difference| to single rank %.3g\n", losses.size(), worst);
  return 0;
}

// --- direct forward_backward runs against a whole-model reference ------------------------------

struct Setup {
  train::Config config;
  std::unique_ptr<parallel::ParallelContext> context;
  std::unique_ptr<models::GPTModel> model;
};

constexpr int64_t kVocab = 90;

Setup make_setup(std::vector<std::string> overrides, int64_t m) {
  Runtime& rt = Runtime::get();
  Setup s;
  s.config = train::load_config("", overrides);
  s.context = std::make_unique<parallel::ParallelContext>(s.config.parallel, rt.world_size(), rt.world_rank(),
                                                          Device::cpu());
  s.model = std::make_unique<models::GPTModel>(
      s.config.model, kVocab, DType::f32, Device::cpu(),
      parallel::pipeline_chunk_layouts(s.config.model.num_layers, s.config.parallel, s.context->pp_size(), s.context->pp_rank()));
  s.model->initialize(1234);
  parallel::setup_pipeline_training(*s.model, *s.context, m);
  return s;
}

parallel::ForwardBackwardArgs make_args(models::GPTModel* model, parallel::ParallelContext* context, int64_t m) {
  parallel::ForwardBackwardArgs args;
  args.model = model;
  args.context = context;
  args.num_micro_batches = m;
  args.micro_batch_size = 2;
  args.seq_length = 16;
  auto tokens = std::make_shared<std::vector<int32_t>>(2 * 17);
  auto mask = std::make_shared<std::vector<float>>(2 * 16);
  args.load_micro_batch = [tokens, mask](int64_t mb) {
    for (size_t i = 0; i < tokens->size(); ++i)
      (*tokens)[i] = static_cast<int32_t>((mb * 131 + static_cast<int64_t>(i * 37 + (i * i) % 11)) % kVocab);
    for (size_t i = 0; i < mask->size(); ++i) (*mask)[i] = (static_cast<int64_t>(i) + mb) % 5 == 0 ? 0.0f : 1.0f;
    return models::MicroBatch{Tensor(tokens->data(), DType::i32, {2, 17}), Tensor(mask->data(), DType::f32, {2, 16}),
                              Tensor(), Tensor()};
  };
  args.dropout = [](int64_t mb) { return nn::DropoutContext{99, static_cast<uint64_t>(mb + 1), true}; };
  args.grad_scale = 1.0 / static_cast<double>(m);
  return args;
}

// Runs the pipelined step, then the whole model on this rank alone, and compares the loss (last
// stage) and every gradient this stage holds (the tied copy after the embedding all-reduce).
parallel::ForwardBackwardResult check_against_whole_model(Setup& s, int64_t m, const std::string& what,
                                                          std::function<void(const parallel::ScheduleStep&)> on_step) {
  Arena arena(size_t(16) << 20);
  auto& store = s.model->parameters();
  store.zero_grads();
  parallel::ForwardBackwardArgs args = make_args(s.model.get(), s.context.get(), m);
  args.on_step = std::move(on_step);
  parallel::ForwardBackwardResult r = parallel::forward_backward(args, arena);
  parallel::all_reduce_tied_embedding_grads(s.model->parameters(), *s.context);
  double pipelined_loss = parallel::value_from_last_stage(*s.context, r.loss.loss_sum.value());

  models::GPTModel whole(s.config.model, kVocab, DType::f32, Device::cpu());
  whole.initialize(1234);
  parallel::ForwardBackwardArgs ref_args = make_args(&whole, nullptr, m);
  parallel::ForwardBackwardResult ref = parallel::forward_backward(ref_args, arena);
  EXPECT(std::fabs(pipelined_loss - ref.loss.loss_sum.value()) <= 1e-5 * std::fabs(ref.loss.loss_sum.value()),
         "%s: loss sum %.9f vs whole model %.9f", what.c_str(), pipelined_loss, ref.loss.loss_sum.value());
  if (s.context->pp_rank() == s.context->pp_size() - 1)
    EXPECT(r.micro_batches == m, "%s: last stage computed %ld losses", what.c_str(), static_cast<long>(r.micro_batches));
  for (const auto& p : store.parameters()) {
    std::string name = p.name == "output_layer.weight" ? "embedding.word_embeddings.weight" : p.name;
    const auto& q = whole.parameters().find(name);
    EXPECT(p.value.numel() == q.value.numel(), "%s: %s size", what.c_str(), p.name.c_str());
    const float* a = p.grad.data_as<float>();
    const float* b = q.grad.data_as<float>();
    const float* va = p.value.data_as<float>();
    const float* vb = q.value.data_as<float>();
    double worst = 0, scale = 1e-3, worst_value = 0;
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
      worst_value = std::max(worst_value, static_cast<double>(std::fabs(va[i] - vb[i])));
    }
    EXPECT(worst <= 1e-5 * scale, "%s: grad of %s differs by %.3g (scale %.3g)", what.c_str(), p.name.c_str(), worst,
           scale);
    EXPECT(worst_value == 0, "%s: value of %s differs from the whole model by %.3g", what.c_str(), p.name.c_str(),
           worst_value);
  }
  return r;
}

std::vector<std::string> pp_overrides(int pp, int64_t layers_per_virtual_stage, int64_t m) {
  std::vector<std::string> o = tiny_overrides();
  o.push_back("parallel.pipeline_model_parallel_size=" + std::to_string(pp));
  o.push_back("parallel.num_layers_per_virtual_pipeline_stage=" + std::to_string(layers_per_virtual_stage));
  o.push_back("training.global_batch_size=" + std::to_string(2 * m));
  return o;
}

// --- the independent model of the schedules (from the spec's description) ----------------------

std::string ev(const char* kind, int64_t mb, int chunk) {
  return std::string(kind) + "(" + std::to_string(mb) + ",c" + std::to_string(chunk) + ")";
}

// 1F1B on stage r: computes F0..F(W-1), then F(W+i) B(i) pairs, then the remaining B; a stage
// receives an input right before the compute that needs it and sends an output right after the
// compute that made it; within one gap between computes sends/receives of activations come before
// those of gradients, sends before receives.
std::vector<std::string> expected_1f1b(int pp, int r, int64_t m) {
  int64_t W = std::min<int64_t>(pp - r - 1, m), R = m - W;
  std::vector<std::pair<char, int64_t>> computes;
  for (int64_t i = 0; i < W; ++i) computes.push_back({'F', i});
  for (int64_t i = 0; i < R; ++i) {
    computes.push_back({'F', W + i});
    computes.push_back({'B', i});
  }
  for (int64_t i = R; i < m; ++i) computes.push_back({'B', i});
  const bool first = r == 0, last = r == pp - 1;
  std::vector<std::string> out;
  std::vector<std::pair<int, std::string>> gap;  // (kind order, event)
  auto flush = [&] {
    std::stable_sort(gap.begin(), gap.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto& g : gap) out.push_back(g.second);
    gap.clear();
  };
  for (auto [kind, mb] : computes) {
    if (kind == 'F' && !first) gap.push_back({1, ev("recv_fwd", mb, 0)});
    if (kind == 'B' && !last) gap.push_back({3, ev("recv_bwd", mb, 0)});
    flush();
    out.push_back(ev(kind == 'F' ? "F" : "B", mb, 0));
    if (kind == 'F' && !last) gap.push_back({0, ev("send_fwd", mb, 0)});
    if (kind == 'B' && !first) gap.push_back({2, ev("send_bwd", mb, 0)});
  }
  flush();
  return out;
}

std::vector<std::string> flatten(const std::vector<parallel::ScheduleStep>& steps) {
  std::vector<std::string> out;
  for (const auto& s : steps) {
    if (s.kind == parallel::ScheduleStep::Kind::forward) out.push_back(ev("F", s.micro_batch, s.chunk));
    else if (s.kind == parallel::ScheduleStep::Kind::backward) out.push_back(ev("B", s.micro_batch, s.chunk));
    else
      for (const auto& i : s.p2p) out.push_back(ev(parallel::p2p_kind_name(i.kind).c_str(), i.micro_batch, i.chunk));
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

// Interleaved compute order from the spec: forward k runs (mb, chunk) of the group table (groups of
// pp micro-batches, chunk-major inside a group); backward k runs the same mb on chunk V-1-chunk;
// warm-up min(mV, 2(pp-r-1) + (V-1)pp) forwards, then F/B pairs, then the remaining backwards.
std::vector<std::string> expected_interleaved_computes(int pp, int r, int V, int64_t m) {
  std::vector<std::pair<int64_t, int>> table;
  for (int64_t g = 0; g < m; g += pp)
    for (int c = 0; c < V; ++c)
      for (int64_t mb = g; mb < std::min<int64_t>(g + pp, m); ++mb) table.push_back({mb, c});
  int64_t total = m * V, warm = std::min<int64_t>(total, 2 * (pp - r - 1) + (V - 1) * pp);
  std::vector<std::string> out;
  auto F = [&](int64_t k) { out.push_back(ev("F", table[k].first, table[k].second)); };
  auto B = [&](int64_t k) { out.push_back(ev("B", table[k].first, V - 1 - table[k].second)); };
  for (int64_t k = 0; k < warm; ++k) F(k);
  for (int64_t k = 0; k < total - warm; ++k) {
    F(k + warm);
    B(k);
  }
  for (int64_t k = total - warm; k < total; ++k) B(k);
  return out;
}

void check_interleaved_trace(int pp, int r, int V, int64_t m, const std::vector<std::string>& trace) {
  std::vector<std::string> computes;
  for (const auto& e : trace)
    if (e[0] == 'F' || e[0] == 'B') computes.push_back(e);
  auto expected = expected_interleaved_computes(pp, r, V, m);
  EXPECT(computes == expected, "interleaved stage %d computes:\n  got      %s\n  expected %s", r, join(computes).c_str(),
         join(expected).c_str());
  // Sends right after the compute that produced them (before the next compute); receives before the
  // compute that consumes them; each exactly where the stage has a neighbour.
  std::map<std::string, size_t> pos;
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT(!pos.count(trace[i]), "stage %d: %s twice", r, trace[i].c_str());
    pos[trace[i]] = i;
  }
  for (int64_t mb = 0; mb < m; ++mb)
    for (int c = 0; c < V; ++c) {
      bool first = r == 0 && c == 0, last = r == pp - 1 && c == V - 1;
      size_t f = pos.at(ev("F", mb, c)), b = pos.at(ev("B", mb, c));
      auto check_send = [&](const char* kind, size_t producer) {
        auto it = pos.find(ev(kind, mb, c));
        EXPECT(it != pos.end() && it->second > producer, "stage %d: %s missing or early", r, ev(kind, mb, c).c_str());
        if (it == pos.end()) return;
        // The spec's steady state runs F then B and only then one batch: a forward's send may follow
        // one backward; otherwise no compute lies between a compute and its send.
        int between = 0;
        bool only_backward = true;
        for (size_t i = producer + 1; i < it->second; ++i)
          if (trace[i][0] == 'F' || trace[i][0] == 'B') ++between, only_backward &= trace[i][0] == 'B';
        bool ok = between == 0 || (kind[5] == 'f' && between == 1 && only_backward);
        EXPECT(ok, "stage %d: %s not right after its compute (or its steady-state F/B pair)", r,
               ev(kind, mb, c).c_str());
      };
      auto check_recv = [&](const char* kind, size_t consumer) {
        auto it = pos.find(ev(kind, mb, c));
        EXPECT(it != pos.end() && it->second < consumer, "stage %d: %s missing or late", r, ev(kind, mb, c).c_str());
      };
      if (!first) check_recv("recv_fwd", f), check_send("send_bwd", b);
      else EXPECT(!pos.count(ev("recv_fwd", mb, c)) && !pos.count(ev("send_bwd", mb, c)), "first stage communicates");
      if (!last) check_send("send_fwd", f), check_recv("recv_bwd", b);
      else EXPECT(!pos.count(ev("send_fwd", mb, c)) && !pos.count(ev("recv_bwd", mb, c)), "last stage communicates");
    }
}

int schedule_mode() {
  Runtime& rt = Runtime::get();
  TESSERA_CHECK(rt.world_size() == 4, "schedule mode runs on 4 ranks");
  const int pp = 4;
  const int64_t m = 8;
  {  // 1F1B
    Setup s = make_setup(pp_overrides(pp, 0, m), m);
    const int r = s.context->pp_rank();
    std::vector<parallel::ScheduleStep> steps;
    auto result = check_against_whole_model(s, m, "1F1B pp=4 m=8",
                                            [&](const parallel::ScheduleStep& st) { steps.push_back(st); });
    auto got = flatten(steps), expected = expected_1f1b(pp, r, m);
    EXPECT(got == expected, "1F1B stage %d order:\n  got      %s\n  expected %s", r, join(got).c_str(),
           join(expected).c_str());
    EXPECT(result.peak_in_flight_micro_batches == pp - r, "1F1B stage %d: peak in-flight micro-batches %ld, bound %d",
           r, static_cast<long>(result.peak_in_flight_micro_batches), pp - r);
    EXPECT(result.activation_arenas <= static_cast<size_t>(pp - r + 1), "1F1B stage %d: %zu arenas for %d in flight",
           r, result.activation_arenas, pp - r);
    std::printf("[stage %d] 1F1B: %ld micro-batches in flight at most (bound W+1 = %d), %zu arenas, peak %.1f KiB\n", r,
                static_cast<long>(result.peak_in_flight_micro_batches), pp - r, result.activation_arenas,
                static_cast<double>(result.peak_activation_bytes) / 1024);
  }
  {  // interleaved, V = 2 (8 layers, 1 per virtual stage)
    Setup s = make_setup(pp_overrides(pp, 1, m), m);
    const int r = s.context->pp_rank();
    EXPECT(s.model->num_chunks() == 2, "interleaved: %d chunks", s.model->num_chunks());
    EXPECT(s.model->chunk_layout(0).first_layer == r && s.model->chunk_layout(1).first_layer == 4 + r,
           "stage %d chunk layers %ld, %ld", r, static_cast<long>(s.model->chunk_layout(0).first_layer),
           static_cast<long>(s.model->chunk_layout(1).first_layer));
    std::vector<parallel::ScheduleStep> steps;
    check_against_whole_model(s, m, "interleaved pp=4 V=2 m=8",
                              [&](const parallel::ScheduleStep& st) { steps.push_back(st); });
    check_interleaved_trace(pp, r, 2, m, flatten(steps));

    // An incompatible number of micro-batches is a ConfigError, before any communication.
    for (int64_t bad : {int64_t{6}, int64_t{3}, int64_t{5}}) {
      bool config_error = false;
      try {
        Arena arena(size_t(1) << 20);
        parallel::forward_backward(make_args(s.model.get(), s.context.get(), bad), arena);
      } catch (const ConfigError& e) {
        config_error = std::string(e.what()).find("micro-batches") != std::string::npos;
      }
      EXPECT(config_error, "interleaved pp=4 with m=%ld must be a ConfigError", static_cast<long>(bad));
      config_error = false;
      try {
        parallel::setup_pipeline_training(*s.model, *s.context, bad);
      } catch (const ConfigError&) {
        config_error = true;
      }
      EXPECT(config_error, "setup with m=%ld must be a ConfigError", static_cast<long>(bad));
    }
  }
  // Layer splits (no communication).
  auto layouts = [](std::vector<std::string> extra, int pp_size, int rank) {
    std::vector<std::string> o = tiny_overrides();
    o.insert(o.end(), extra.begin(), extra.end());
    train::Config config = train::load_config("", o);
    return parallel::pipeline_chunk_layouts(config.model.num_layers, config.parallel, pp_size, rank);
  };
  auto config_error = [&](std::vector<std::string> extra, int pp_size) {
    try {
      layouts(extra, pp_size, 0);
    } catch (const ConfigError&) {
      return true;
    }
    return false;
  };
  EXPECT(config_error({"model.num_layers=6"}, 4), "6 layers over 4 stages must be a ConfigError");
  EXPECT(!config_error({"model.num_layers=6", "parallel.pipeline_layer_split=\"1,2,2,1\""}, 4), "explicit split");
  auto l2 = layouts({"model.num_layers=6", "parallel.pipeline_layer_split=\"1,2,2,1\""}, 4, 2);
  EXPECT(l2.size() == 1 && l2[0].first_layer == 3 && l2[0].num_layers == 2 && !l2[0].has_embedding && !l2[0].has_head,
         "split stage 2 layout");
  EXPECT(config_error({"model.num_layers=6", "parallel.pipeline_layer_split=\"1,2,2\""}, 4), "3 counts for 4 stages");
  EXPECT(config_error({"model.num_layers=6", "parallel.pipeline_layer_split=\"1,2,x,1\""}, 4), "bad count");
  EXPECT(config_error({"parallel.num_layers_per_virtual_pipeline_stage=3"}, 4), "8 layers, 4 stages x 3");
  return 0;
}

int shapes_mode(int64_t m, int64_t layers_per_virtual_stage) {
  Runtime& rt = Runtime::get();
  const int pp = rt.world_size();
  std::vector<std::string> o = pp_overrides(pp, layers_per_virtual_stage, m);
  o.push_back("model.num_layers=" + std::to_string(pp * 2));
  Setup s = make_setup(o, m);
  std::string what = "pp=" + std::to_string(pp) + " m=" + std::to_string(m);
  for (int step = 0; step < 2; ++step) {  // twice: the arena pool is reused
    auto r = check_against_whole_model(s, m, what, nullptr);
    int64_t bound = std::min<int64_t>(pp - s.context->pp_rank(), m);
    if (layers_per_virtual_stage == 0)
      EXPECT(r.peak_in_flight_micro_batches == bound, "%s stage %d: %ld in flight, bound %ld", what.c_str(),
             s.context->pp_rank(), static_cast<long>(r.peak_in_flight_micro_batches), static_cast<long>(bound));
  }
  // Evaluation (forward only) through the same pipeline.
  Arena arena(size_t(16) << 20);
  auto args = make_args(s.model.get(), s.context.get(), m);
  args.forward_only = true;
  auto r = parallel::forward_backward(args, arena);
  int64_t n = parallel::value_from_last_stage(*s.context, r.micro_batches);
  EXPECT(n == m, "%s forward only: %ld losses", what.c_str(), static_cast<long>(n));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    Runtime& rt = Runtime::get();
    if (mode == "train" && argc > 2) train_mode(argv[2], with(tiny_overrides(), 3, argc, argv));
    else if (mode == "compare" && argc > 2) compare_mode(argv[2], with(tiny_overrides(), 3, argc, argv));
    else if (mode == "schedule") schedule_mode();
    else if (mode == "shapes" && argc > 2) shapes_mode(std::stoll(argv[2]), argc > 3 ? std::stoll(argv[3]) : 0);
    else TESSERA_CONFIG_FAIL("usage: pipeline_mpi_test train OUT | compare REF [key=value...] | schedule | shapes M [n]");
    int total = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rt.world_rank() == 0)
      std::printf("pipeline %s on %d ranks: %s (%d failures)\n", mode.c_str(), rt.world_size(),
                  total ? "FAILED" : "passed", total);
    return total == 0 ? 0 : 1;
  });
}
