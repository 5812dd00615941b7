#include "tessera/generate/generator.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/generate/beam_search.h"
#include "tessera/ops/argmax.h"
#include "tessera/ops/elementwise.h"
#include "tessera/runtime/device_copy.h"
#include "tessera/runtime/mpi_check.h"

namespace tessera::generate {

namespace {
constexpr int kLogitsTag = 4207;

// The same words read as f32 (an i32 buffer's half holding log-probabilities).
Tensor as_f32(const Tensor& t) { return Tensor(t.data(), DType::f32, t.shape(), t.device()); }

std::vector<float> log_softmax_rows(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  std::vector<float> out(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
    double max_value = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - max_value);
    const double lse = max_value + std::log(sum);
    for (int64_t v = 0; v < vocab; ++v) out[r * vocab + v] = static_cast<float>(row[v] - lse);
  }
  return out;
}

// Host -> device without a stream synchronisation (small pageable copies are staged at once).
void upload_words(const int32_t* host, const Tensor& device_words) {
  if (device_words.numel() == 0) return;
  if (device_words.device().is_cpu())
    std::memcpy(device_words.data(), host, static_cast<size_t>(device_words.numel()) * sizeof(int32_t));
  else
    ops::copy(Tensor(const_cast<int32_t*>(host), DType::i32, device_words.shape(), Device::cpu()), device_words);
}

// (argmax, log-probability) pairs from a device summary [indices (rows) | f32 log-probabilities (rows)]:
// one device -> host copy.
std::vector<float> download_summary(const Tensor& summary, int64_t rows) {
  std::vector<int32_t> host(static_cast<size_t>(2 * rows));
  if (summary.device().is_cpu()) std::memcpy(host.data(), summary.data(), host.size() * sizeof(int32_t));
  else ops::copy(summary, Tensor(host.data(), DType::i32, summary.shape(), Device::cpu()));  // waits for the step
  std::vector<float> out(static_cast<size_t>(2 * rows));
  for (int64_t r = 0; r < rows; ++r) {
    out[2 * r] = static_cast<float>(host[r]);  // exact below 2^24
    std::memcpy(&out[2 * r + 1], &host[rows + r], sizeof(float));
  }
  return out;
}
}  // namespace

void Generator::allocate_request(int64_t rows, int64_t capacity) {
  cache_arena_.reset();
  cache_ = model_.allocate_kv_cache(cache_arena_, rows, capacity);
  graph_.reset();  // new buffers: the next decode step captures again
  // [past | key mask bytes (whole words) | ids | positions], at fixed addresses for the request (a
  // captured step reads them in place); every layer's attention reads the cached-token count here.
  const int64_t mask_words = (rows * capacity + 3) / 4;
  inputs_device_ = cache_arena_.allocate(DType::i32, {1 + mask_words + 2 * capacity * rows});
  inputs_host_.assign(static_cast<size_t>(inputs_device_.numel()), 0);
  if (cache_.past_device.data()) {
    cache_.past_device = inputs_device_.rows(0, 1);
    for (auto& chunk : cache_.chunks)
      for (auto& slot : chunk) slot.past = cache_.past_device;
  }
}

Tensor Generator::upload_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                                const std::vector<uint8_t>& key_mask, int64_t past, int64_t n, Tensor& ids_t,
                                Tensor& positions_t) {
  const int64_t rows = cache_.batch, capacity = cache_.capacity, mask_words = (rows * capacity + 3) / 4;
  // The step's n ids and n positions follow the mask: one upload a step (a decode step's n is the
  // batch, so a captured step finds them at the same addresses every time).
  const int64_t ids_at = 1 + mask_words, positions_at = ids_at + n;
  TESSERA_CHECK(n <= capacity * rows && static_cast<int64_t>(ids.size()) == n &&
                    static_cast<int64_t>(positions.size()) == n &&
                    static_cast<int64_t>(key_mask.size()) == rows * capacity,
                "generation step inputs do not match the request's cache");
  int32_t* host = inputs_host_.data();
  host[0] = static_cast<int32_t>(past);
  std::memcpy(host + 1, key_mask.data(), key_mask.size());
  std::memcpy(host + ids_at, ids.data(), static_cast<size_t>(n) * sizeof(int32_t));
  std::memcpy(host + positions_at, positions.data(), static_cast<size_t>(n) * sizeof(int32_t));
  upload_words(host, inputs_device_.rows(0, positions_at + n));
  ids_t = inputs_device_.rows(ids_at, ids_at + n);
  positions_t = inputs_device_.rows(positions_at, positions_at + n);
  return Tensor(static_cast<uint8_t*>(inputs_device_.data()) + sizeof(int32_t), DType::u8, {rows, capacity},
                inputs_device_.device());
}

Generator::Generator(models::GPTModel& model, parallel::ParallelContext& context, const ParallelConfig& parallel,
                     int64_t pad_token, bool cuda_graphs)
    : model_(model),
      context_(context),
      pad_token_(pad_token),
      cache_arena_(size_t(64) << 20, context.device()),
      step_arena_(size_t(64) << 20, context.device()),
      cuda_graphs_(cuda_graphs && context.device().is_cuda() && context.tp_size() == 1 && context.pp_size() == 1) {
  if (context.dp_size() != 1)
    TESSERA_CONFIG_FAIL("tessera-generate runs with data-parallel size 1: the world size (", context.grid().world_size(),
                        ") must equal tensor_model_parallel_size x pipeline_model_parallel_size (", context.tp_size(),
                        " x ", context.pp_size(), "), got data-parallel size ", context.dp_size());
  if (parallel.sequence_parallel)
    TESSERA_CONFIG_FAIL("parallel.sequence_parallel = true is not supported by tessera-generate (set it to false)");
  if (parallel.num_layers_per_virtual_pipeline_stage > 0)
    TESSERA_CONFIG_FAIL("parallel.num_layers_per_virtual_pipeline_stage = ", parallel.num_layers_per_virtual_pipeline_stage,
                        " is not supported by tessera-generate (set it to 0)");
  if (parallel.recompute_granularity != "none")
    TESSERA_CONFIG_FAIL("parallel.recompute_granularity = ", parallel.recompute_granularity,
                        " is not supported by tessera-generate (set it to none)");
  TESSERA_CHECK(model.num_chunks() == 1, "generation needs one model chunk per rank");
}

int64_t Generator::max_length() const { return model_.config().max_position_embeddings; }

void Generator::broadcast_ints(std::vector<int32_t>& values) {
  TESSERA_MPI_CHECK(MPI_Bcast(values.data(), static_cast<int>(values.size()), MPI_INT, 0, MPI_COMM_WORLD));
}

std::vector<GenerationResult> Generator::run(const GenerationRequest& request) {
  TESSERA_CHECK(context_.world().rank() == 0, "Generator::run is world rank 0's; the others follow()");
  std::string text = to_json(request);
  int64_t size = static_cast<int64_t>(text.size());
  TESSERA_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  TESSERA_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD));
  return execute(request);
}

void Generator::stop_followers() {
  int64_t size = -1;
  TESSERA_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
}

bool Generator::follow() {
  int64_t size = 0;
  TESSERA_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  if (size < 0) return false;
  std::string text(static_cast<size_t>(size), '\0');
  TESSERA_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD));
  execute(request_from_json(text));
  return true;
}

std::vector<GenerationResult> Generator::execute(const GenerationRequest& request) {
  if (request.num_beams <= 1) return sample_batch(request);
  std::vector<GenerationResult> results;
  for (const auto& prompt : request.prompts) results.push_back(beam_search(request, prompt));
  return results;
}

std::vector<float> Generator::forward(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                                      const std::vector<uint8_t>& key_mask, int64_t past, int64_t tokens,
                                      bool last_only, bool greedy_only) {
  const int pp = context_.pp_size(), pp_rank = context_.pp_rank();
  const int64_t rows = cache_.batch, vocab = model_.vocab_size(), padded = model_.padded_vocab_size();
  step_arena_.reset();
  Tensor ids_t, positions_t, input;
  const Tensor mask_t = upload_inputs(ids, positions, key_mask, past, tokens * rows, ids_t, positions_t);
  // A greedy decode step on one GPU: replay the captured graph (captured at the first such step).
  if (cuda_graphs_ && !graph_failed_ && tokens == 1 && last_only && greedy_only) {
    if (!graph_.ready())
      graph_failed_ = !graph_.capture([&] {
        Tensor logits = model_.forward_cached(0, step_arena_, ids_t, positions_t, Tensor(), mask_t, cache_, past, 1, true);
        graph_summary_ = step_arena_.allocate(DType::i32, {2 * rows});
        ops::argmax_log_softmax(logits, vocab, graph_summary_.rows(0, rows), as_f32(graph_summary_.rows(rows, 2 * rows)));
      });
    if (graph_.ready()) {
      graph_.launch();
      return download_summary(graph_summary_, rows);
    }
  }
  if (pp_rank > 0) {
    input = step_arena_.allocate(model_.parameters().dtype(), {tokens * rows, model_.config().hidden_size});
    context_.pipeline().recv(input, pp_rank - 1);
  }
  Tensor out = model_.forward_cached(0, step_arena_, ids_t, positions_t, input, mask_t, cache_, past, tokens, last_only);
  const int64_t out_rows = last_only ? rows : tokens * rows;
  const int64_t width = greedy_only ? 2 : vocab;  // floats per row sent to rank 0
  std::vector<float> logits;
  const bool world_root = context_.world().rank() == 0;
  if (pp_rank < pp - 1) {
    context_.pipeline().send(out, pp_rank + 1);
  } else if (context_.tp_rank() == 0 && greedy_only) {
    TESSERA_CHECK(last_only, "greedy_only needs last_only");
    Tensor summary = step_arena_.allocate(DType::i32, {2 * out_rows});  // indices, then f32 log-probabilities
    ops::argmax_log_softmax(out, vocab, summary.rows(0, out_rows), as_f32(summary.rows(out_rows, 2 * out_rows)));
    logits = download_summary(summary, out_rows);
    if (!world_root)
      TESSERA_MPI_CHECK(MPI_Send(logits.data(), static_cast<int>(logits.size()), MPI_FLOAT, 0, kLogitsTag,
                                 MPI_COMM_WORLD));
  } else if (context_.tp_rank() == 0) {
    Tensor f32 = out;
    if (out.dtype() != DType::f32) {
      f32 = step_arena_.allocate(DType::f32, out.shape());
      ops::copy(out, f32);
    }
    std::vector<float> full(static_cast<size_t>(out_rows * padded));
    Tensor host(full.data(), DType::f32, {out_rows, padded}, Device::cpu());
    if (f32.device().is_cpu()) std::memcpy(full.data(), f32.data(), full.size() * sizeof(float));
    else copy_synchronous(f32, host);
    logits.resize(static_cast<size_t>(out_rows * vocab));
    for (int64_t r = 0; r < out_rows; ++r)
      std::memcpy(logits.data() + r * vocab, full.data() + r * padded, static_cast<size_t>(vocab) * sizeof(float));
    if (!world_root)
      TESSERA_MPI_CHECK(MPI_Send(logits.data(), static_cast<int>(logits.size()), MPI_FLOAT, 0, kLogitsTag,
                                 MPI_COMM_WORLD));
  }
  if (world_root && pp > 1) {
    logits.resize(static_cast<size_t>(out_rows * width));
    const int last_stage = context_.pipeline().world_ranks().at(static_cast<size_t>(pp - 1));
    TESSERA_MPI_CHECK(MPI_Recv(logits.data(), static_cast<int>(logits.size()), MPI_FLOAT, last_stage, kLogitsTag,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  return logits;
}

namespace {
// Host state of a left-padded batch: tokens and positions per cache index, sequence-major.
struct Batch {
  int64_t rows = 0, capacity = 0, prompt_len = 0;
  std::vector<int64_t> pad;           // left padding per row
  std::vector<int32_t> tokens;        // [capacity][rows]
  std::vector<int32_t> positions;     // [capacity][rows]
  std::vector<uint8_t> key_mask;      // [rows][capacity]

  Batch(const std::vector<const std::vector<int32_t>*>& prompts, int64_t max_new, int64_t pad_token) {
    rows = static_cast<int64_t>(prompts.size());
    for (const auto* p : prompts) prompt_len = std::max<int64_t>(prompt_len, static_cast<int64_t>(p->size()));
    capacity = prompt_len + max_new;
    pad.resize(static_cast<size_t>(rows));
    tokens.assign(static_cast<size_t>(capacity * rows), static_cast<int32_t>(pad_token));
    positions.assign(tokens.size(), 0);
    key_mask.assign(tokens.size(), 0);
    for (int64_t b = 0; b < rows; ++b) {
      pad[b] = prompt_len - static_cast<int64_t>(prompts[b]->size());
      for (int64_t s = pad[b]; s < prompt_len; ++s) {
        tokens[s * rows + b] = (*prompts[b])[s - pad[b]];
        positions[s * rows + b] = static_cast<int32_t>(s - pad[b]);
        key_mask[b * capacity + s] = 1;
      }
    }
  }
  // Row b's token at cache index s.
  void set(int64_t s, int64_t b, int32_t token) {
    tokens[s * rows + b] = token;
    positions[s * rows + b] = static_cast<int32_t>(s - pad[b]);
    key_mask[b * capacity + s] = 1;
  }
  std::vector<int32_t> slice(const std::vector<int32_t>& v, int64_t begin, int64_t end) const {
    return {v.begin() + begin * rows, v.begin() + end * rows};
  }
  // Rows reordered: row i takes old row source[i] (beam search).
  void reorder(const std::vector<int64_t>& source) {
    std::vector<int32_t> t = tokens, p = positions;
    std::vector<uint8_t> m = key_mask;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t s = 0; s < capacity; ++s) {
        tokens[s * rows + i] = t[s * rows + source[i]];
        positions[s * rows + i] = p[s * rows + source[i]];
      }
      std::memcpy(key_mask.data() + i * capacity, m.data() + source[i] * capacity, static_cast<size_t>(capacity));
    }
  }
};

// log p(token at s) for s in (first, prompt_len) from all-token logits (sequence-major rows).
std::vector<float> prompt_logprobs(const std::vector<float>& logits, const Batch& batch, int64_t b, int64_t vocab) {
  std::vector<float> out;
  for (int64_t s = batch.pad[b] + 1; s < batch.prompt_len; ++s) {
    std::span<const float> row(logits.data() + ((s - 1) * batch.rows + b) * vocab, static_cast<size_t>(vocab));
    out.push_back(static_cast<float>(log_softmax_at(row, batch.tokens[s * batch.rows + b])));
  }
  return out;
}
}  // namespace

std::vector<GenerationResult> Generator::sample_batch(const GenerationRequest& request) {
  std::vector<const std::vector<int32_t>*> prompts;
  for (const auto& p : request.prompts) prompts.push_back(&p);
  Batch batch(prompts, request.max_new_tokens, pad_token_);
  const int64_t rows = batch.rows, P = batch.prompt_len, vocab = model_.vocab_size();
  allocate_request(rows, batch.capacity);
  const bool root = context_.world().rank() == 0;
  std::vector<GenerationResult> results(root ? static_cast<size_t>(rows) : 0);

  // Greedy without prompt log-probabilities: the argmax is taken where the logits are.
  const bool greedy = request.sampling.greedy();
  bool summary = greedy && !request.prompt_logprobs;
  std::vector<float> logits = forward(batch.slice(batch.tokens, 0, P), batch.slice(batch.positions, 0, P),
                                      batch.key_mask, 0, P, !request.prompt_logprobs, summary);
  if (root)
    for (int64_t b = 0; b < rows; ++b) {
      results[b].prompt_length = static_cast<int64_t>(prompts[b]->size());
      results[b].output_ids = *prompts[b];
      if (request.prompt_logprobs) results[b].logprobs = prompt_logprobs(logits, batch, b, vocab);
    }
  int64_t last_row_offset = request.prompt_logprobs ? (P - 1) * rows : 0;
  const RandomStream stream(request.sampling.seed, stream_id("generate.sample"));
  double top_p = request.sampling.top_p;
  std::vector<bool> finished(static_cast<size_t>(rows), false);
  for (int64_t step = 0;; ++step) {
    std::vector<int32_t> decision(static_cast<size_t>(1 + rows), 0);
    if (root) {
      bool all_finished = true;
      for (int64_t b = 0; b < rows; ++b) {
        int32_t token = static_cast<int32_t>(pad_token_);
        if (!finished[b] && summary) {
          token = static_cast<int32_t>(logits[2 * b]);
          results[b].output_ids.push_back(token);
          results[b].logprobs.push_back(logits[2 * b + 1]);
          if (token == request.stop_token) finished[b] = true;
        } else if (!finished[b]) {
          std::span<const float> row(logits.data() + (last_row_offset + b) * vocab, static_cast<size_t>(vocab));
          std::vector<float> work(row.begin(), row.end());
          const double u = stream.uniform_double(static_cast<uint64_t>(step * rows + b));
          token = static_cast<int32_t>(choose_token(work, request.sampling, top_p, u));
          results[b].output_ids.push_back(token);
          results[b].logprobs.push_back(static_cast<float>(log_softmax_at(row, token)));
          if (token == request.stop_token) finished[b] = true;
        }
        all_finished = all_finished && finished[b];
        decision[1 + b] = token;
      }
      decision[0] = all_finished || step + 1 >= request.max_new_tokens;
      top_p = next_top_p(top_p, request.sampling.top_p_decay, request.sampling.top_p_bound);
    }
    broadcast_ints(decision);
    if (decision[0]) break;
    const int64_t s = P + step;
    for (int64_t b = 0; b < rows; ++b) batch.set(s, b, decision[1 + b]);
    summary = greedy;
    if (request.use_kv_cache)
      logits = forward(batch.slice(batch.tokens, s, s + 1), batch.slice(batch.positions, s, s + 1), batch.key_mask, s,
                       1, true, summary);
    else
      logits = forward(batch.slice(batch.tokens, 0, s + 1), batch.slice(batch.positions, 0, s + 1), batch.key_mask, 0,
                       s + 1, true, summary);
    last_row_offset = 0;
  }
  return results;
}

GenerationResult Generator::beam_search(const GenerationRequest& request, const std::vector<int32_t>& prompt) {
  const int64_t beams = request.num_beams;
  std::vector<const std::vector<int32_t>*> prompts(static_cast<size_t>(beams), &prompt);
  Batch batch(prompts, request.max_new_tokens, pad_token_);
  const int64_t P = batch.prompt_len, vocab = model_.vocab_size();
  allocate_request(beams, batch.capacity);
  const bool root = context_.world().rank() == 0;
  GenerationResult result;
  result.prompt_length = P;
  result.output_ids = prompt;

  std::vector<float> logits = forward(batch.slice(batch.tokens, 0, P), batch.slice(batch.positions, 0, P),
                                      batch.key_mask, 0, P, !request.prompt_logprobs);
  if (root && request.prompt_logprobs) {
    result.logprobs = prompt_logprobs(logits, batch, 0, vocab);
    logits.erase(logits.begin(), logits.begin() + (P - 1) * beams * vocab);
  }
  BeamSearch search(beams, request.length_penalty, request.stop_token);
  for (int64_t step = 0;; ++step) {
    std::vector<int32_t> decision(static_cast<size_t>(1 + 2 * beams), 0);
    if (root) {
      const auto chosen = search.step(log_softmax_rows(logits, beams, vocab), vocab, step + 1 >= request.max_new_tokens);
      decision[0] = search.done();
      for (int64_t i = 0; i < beams; ++i) {
        decision[1 + i] = chosen.token[i];
        decision[1 + beams + i] = static_cast<int32_t>(chosen.source[i]);
      }
    }
    broadcast_ints(decision);
    if (decision[0]) break;
    std::vector<int64_t> source(decision.begin() + 1 + beams, decision.end());
    std::vector<int64_t> identity(static_cast<size_t>(beams));
    std::iota(identity.begin(), identity.end(), 0);
    const int64_t s = P + step;
    if (source != identity) {
      batch.reorder(source);
      step_arena_.reset();
      for (auto& chunk : cache_.chunks)
        for (auto& slot : chunk)
          for (const Tensor* t : {&slot.k, &slot.v}) {
            Tensor scratch = step_arena_.allocate(t->dtype(), t->shape());
            for (int64_t i = 0; i < beams; ++i) ops::copy(t->rows(source[i], source[i] + 1), scratch.rows(i, i + 1));
            ops::copy(scratch, *t);
          }
    }
    for (int64_t b = 0; b < beams; ++b) batch.set(s, b, decision[1 + b]);
    if (request.use_kv_cache)
      logits = forward(batch.slice(batch.tokens, s, s + 1), batch.slice(batch.positions, s, s + 1), batch.key_mask, s,
                       1, true);
    else
      logits = forward(batch.slice(batch.tokens, 0, s + 1), batch.slice(batch.positions, 0, s + 1), batch.key_mask, 0,
                       s + 1, true);
  }
  if (root) {
    const BeamHypothesis& best = search.best();
    result.output_ids.insert(result.output_ids.end(), best.tokens.begin(), best.tokens.end());
    result.logprobs.insert(result.logprobs.end(), best.logprobs.begin(), best.logprobs.end());
  }
  return result;
}

}  // namespace tessera::generate
