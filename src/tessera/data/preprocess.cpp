#include "tessera/data/preprocess.h"

#include "tessera/data/tokenizer_gpt2_bpe.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/preprocess_input.h"
#include "tessera/data/preprocess_sentence_splitter.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"

namespace tessera::data {

namespace fs = std::filesystem;

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key, bool split_sentences) {
  return output_prefix + "_" + key + (split_sentences ? "_sentence" : "_document");
}

namespace {

using Clock = std::chrono::steady_clock;

// What one thread made of one chunk of whole lines.
struct ChunkResult {
  std::vector<std::vector<int32_t>> tokens;           // per key
  std::vector<std::vector<int64_t>> sequence_lengths;  // per key
  std::vector<std::vector<int64_t>> document_sizes;    // per key: sequences in each document
  int64_t lines = 0, documents = 0;
  size_t bytes = 0;
  std::vector<std::pair<int64_t, std::string>> bad_lines;  // (line index within chunk, what is wrong)
  std::exception_ptr failure;                             // a non-input error (tokenizer, memory)
};

class ChunkEncoder {
 public:
  // Each worker owns its tokenizer: measured on 4 cores this scales better than one shared
  // instance (whose BPE cache takes a lock per lookup). GPT-2 BPE workers still share a
  // second-level cache, so each pre-token is merged once, not once per worker.
  ChunkEncoder(const PreprocessOptions& options, const std::shared_ptr<BpeCache>& shared_cache)
      : options_(options), tokenizer_(make_tokenizer(options.tokenizer)) {
    if (auto* bpe = dynamic_cast<GPT2BPETokenizer*>(tokenizer_.get())) bpe->share_cache(shared_cache);
  }

  void encode(std::string_view chunk, ChunkResult& out) const {
    const size_t keys = options_.json_keys.size();
    out.tokens.assign(keys, {});
    out.sequence_lengths.assign(keys, {});
    out.document_sizes.assign(keys, {});
    out.bytes = chunk.size();
    std::vector<std::string> texts(keys);
    size_t pos = 0;
    while (pos < chunk.size()) {
      const char* nl = static_cast<const char*>(std::memchr(chunk.data() + pos, '\n', chunk.size() - pos));
      const size_t end = nl ? static_cast<size_t>(nl - chunk.data()) : chunk.size();
      std::string_view line = chunk.substr(pos, end - pos);
      pos = end + 1;
      const int64_t line_index = out.lines++;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line: not a document
      if (!read_keys(line, texts, line_index, out)) continue;
      for (size_t k = 0; k < keys; ++k) encode_document(texts[k], k, out);
      ++out.documents;
    }
  }

 private:
  bool read_keys(std::string_view line, std::vector<std::string>& texts, int64_t line_index, ChunkResult& out) const {
    nlohmann::json doc = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      // Parse again with exceptions for nlohmann's description of where the JSON breaks.
      std::string what = "malformed JSON";
      try {
        nlohmann::json again = nlohmann::json::parse(line.begin(), line.end());
        (void)again;
      } catch (const nlohmann::json::exception& e) {
        what = std::string("malformed JSON: ") + e.what();
      }
      out.bad_lines.emplace_back(line_index, what);
      return false;
    }
    if (!doc.is_object()) {
      out.bad_lines.emplace_back(line_index, std::string("expected a JSON object, got ") + doc.type_name());
      return false;
    }
    for (size_t k = 0; k < options_.json_keys.size(); ++k) {
      auto it = doc.find(options_.json_keys[k]);
      if (it == doc.end()) {
        out.bad_lines.emplace_back(line_index, "missing key \"" + options_.json_keys[k] + "\" (--json-keys)");
        return false;
      }
      if (!it->is_string()) {
        out.bad_lines.emplace_back(line_index, "key \"" + options_.json_keys[k] + "\" is a " + it->type_name() +
                                                   ", expected a string");
        return false;
      }
      texts[k] = it->get<std::string>();
    }
    return true;
  }

  void encode_document(const std::string& text, size_t key, ChunkResult& out) const {
    auto& tokens = out.tokens[key];
    auto& lengths = out.sequence_lengths[key];
    int64_t sequences = 0;
    auto add = [&](std::string_view piece) {
      std::vector<int32_t> ids = tokenizer_->tokenize(piece);
      if (ids.empty()) return;  // Megatron drops empty tokenizations
      tokens.insert(tokens.end(), ids.begin(), ids.end());
      lengths.push_back(static_cast<int64_t>(ids.size()));
      ++sequences;
    };
    if (options_.split_sentences) {
      for (std::string_view sentence : split_sentences(text)) add(sentence);
    } else {
      add(text);
    }
    if (sequences > 0 && options_.append_eod) {
      tokens.push_back(tokenizer_->eod());
      ++lengths.back();
    }
    out.document_sizes[key].push_back(sequences);
  }

  const PreprocessOptions& options_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Progress on rank 0: a bar with MB/s on a terminal, Megatron-style log lines otherwise.
class Progress {
 public:
  Progress(size_t total_bytes, const PreprocessOptions& options)
      : total_(total_bytes), interval_(std::max<int64_t>(1, options.log_interval)),
        enabled_(options.progress && log::is_output_rank()), terminal_(::isatty(STDERR_FILENO) == 1),
        start_(Clock::now()), last_draw_(start_) {}

  void update(size_t bytes, int64_t documents) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double mbps = seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0;
    if (terminal_) {
      if (now - last_draw_ < std::chrono::milliseconds(100) && bytes < total_) return;
      last_draw_ = now;
      const double fraction = total_ ? static_cast<double>(bytes) / static_cast<double>(total_) : 1.0;
      const int width = 30, filled = static_cast<int>(fraction * width);
      std::fprintf(stderr, "\r[%s%s] %5.1f%% %8.2f MB/s %lld docs", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(), 100.0 * fraction, mbps,
                   static_cast<long long>(documents));
      std::fflush(stderr);
      drawn_ = true;
      return;
    }
    while (documents >= next_log_) {
      log::info("Processed ", next_log_, " documents (", static_cast<int64_t>(next_log_ / std::max(seconds, 1e-9)),
                " docs/s, ", mbps, " MB/s).");
      next_log_ += interval_;
    }
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  size_t total_;
  int64_t interval_;
  bool enabled_, terminal_, drawn_ = false;
  Clock::time_point start_, last_draw_;
  int64_t next_log_ = interval_;
};

struct RankPaths {
  std::vector<std::string> parts;  // per key: this rank's output (temporary) prefix
};

void remove_pair(const std::string& prefix) {
  std::error_code ignored;
  fs::remove(prefix + ".bin", ignored);
  fs::remove(prefix + ".idx", ignored);
}

std::string hidden_sibling(const std::string& final_prefix, const std::string& suffix) {
  const fs::path p(final_prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string name(1, '.');  // built by appends: GCC 12 warns (-Wrestrict, falsely) on "." + string
  name += p.filename().string();
  name += suffix;
  return (dir / name).string();
}

// Encodes [begin, end) of the input with `workers` threads into one builder per key, in order.
void encode_range(const PreprocessOptions& options, const PreprocessInput& input, size_t begin, size_t end,
                  const std::vector<std::string>& part_prefixes, IndexDType dtype, PreprocessReport& report) {
  const std::string_view text = input.text();
  // Chunk boundaries, all at line starts.
  std::vector<size_t> bounds{begin};
  while (bounds.back() < end) {
    size_t next = align_to_line_start(text, std::min(end, bounds.back() + std::max<size_t>(options.chunk_bytes, 1)));
    bounds.push_back(std::min(next, end));
  }
  const size_t chunks = bounds.size() - 1;
  const int64_t first_line = line_number_at(text, begin);

  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const auto& prefix : part_prefixes) builders.push_back(std::make_unique<IndexedDatasetBuilder>(prefix + ".bin", dtype));

  // More workers than chunks or cores only adds tokenizer loads (each worker loads its own).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int workers = std::max(1, std::min({options.workers, cores, static_cast<int>(std::min<size_t>(chunks, 1 << 20))}));
  if (workers < options.workers)
    log::info("using ", workers, " of the ", options.workers, " requested workers (", chunks, " chunk(s) of input, ",
              cores, " core(s))");
  const size_t window = static_cast<size_t>(4 * workers);
  std::mutex mutex;
  std::condition_variable produced, consumed;
  std::map<size_t, ChunkResult> ready;
  size_t next_chunk = 0, written = 0;
  bool stop = false;

  std::exception_ptr setup_failure;
  int encoders_ready = 0;  // workers start encoding once every one has loaded its tokenizer
  const auto shared_cache = GPT2BPETokenizer::make_shared_cache();
  auto work = [&]() {
    std::unique_ptr<ChunkEncoder> encoder;
    try {
      encoder = std::make_unique<ChunkEncoder>(options, shared_cache);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!setup_failure) setup_failure = std::current_exception();
      stop = true;
      produced.notify_all();
      consumed.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++encoders_ready;
    }
    produced.notify_all();
    consumed.notify_all();
    while (true) {
      size_t index;
      {
        std::unique_lock<std::mutex> lock(mutex);
        consumed.wait(lock, [&] {
          return stop || (encoders_ready == workers && (next_chunk >= chunks || next_chunk < written + window));
        });
        if (stop || next_chunk >= chunks) return;
        index = next_chunk++;
      }
      ChunkResult result;
      try {
        encoder->encode(text.substr(bounds[index], bounds[index + 1] - bounds[index]), result);
      } catch (...) {
        result.failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      ready.emplace(index, std::move(result));
      produced.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(work);
  auto shutdown = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    consumed.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  };

  {
    std::unique_lock<std::mutex> lock(mutex);
    produced.wait(lock, [&] { return encoders_ready == workers || setup_failure; });
  }
  const auto encode_start = Clock::now();
  Progress progress(end - begin, options);
  int64_t line_base = first_line;
  size_t bytes_done = 0;
  int64_t warned = 0;
  try {
    for (size_t c = 0; c < chunks; ++c) {
      ChunkResult result;
      {
        std::unique_lock<std::mutex> lock(mutex);
        produced.wait(lock, [&] { return ready.count(c) > 0 || setup_failure; });
        if (setup_failure) std::rethrow_exception(setup_failure);
        result = std::move(ready[c]);
        ready.erase(c);
        written = c + 1;
      }
      consumed.notify_all();
      if (result.failure) std::rethrow_exception(result.failure);
      for (const auto& [line_index, what] : result.bad_lines) {
        if (!options.skip_bad_lines)
          TESSERA_CONFIG_FAIL(input.path(), ":", line_base + line_index, ": ", what,
                              " (use --skip-bad-lines to skip such lines)");
        if (warned++ < 10) log::warn(input.path(), ":", line_base + line_index, ": skipped: ", what);
      }
      report.bad_lines += static_cast<int64_t>(result.bad_lines.size());
      for (size_t k = 0; k < builders.size(); ++k) {
        size_t token_offset = 0, length_offset = 0;
        const auto& tokens = result.tokens[k];
        const auto& lengths = result.sequence_lengths[k];
        for (int64_t sequences : result.document_sizes[k]) {
          size_t doc_tokens = 0;
          for (int64_t s = 0; s < sequences; ++s) doc_tokens += static_cast<size_t>(lengths[length_offset + static_cast<size_t>(s)]);
          builders[k]->add_document(std::span<const int32_t>(tokens.data() + token_offset, doc_tokens),
                                    std::span<const int64_t>(lengths.data() + length_offset, static_cast<size_t>(sequences)));
          token_offset += doc_tokens;
          length_offset += static_cast<size_t>(sequences);
        }
      }
      report.documents += result.documents;
      line_base += result.lines;
      bytes_done += result.bytes;
      report.bytes += static_cast<int64_t>(result.bytes);
      progress.update(bytes_done, report.documents);
    }
    shutdown();
    if (setup_failure) std::rethrow_exception(setup_failure);
    progress.finish();
    for (size_t k = 0; k < builders.size(); ++k) builders[k]->finalize(part_prefixes[k] + ".idx");
    report.seconds = std::chrono::duration<double>(Clock::now() - encode_start).count();
  } catch (...) {
    progress.finish();
    shutdown();
    throw;
  }
}

}  // namespace

PreprocessReport run_preprocess(const PreprocessOptions& options) {
  if (options.json_keys.empty()) TESSERA_CONFIG_FAIL("--json-keys: give at least one key");
  if (options.output_prefix.empty()) TESSERA_CONFIG_FAIL("--output-prefix is required");
  if (options.workers < 1) TESSERA_CONFIG_FAIL("--workers = ", options.workers, ": must be at least 1");
  const bool mpi = Runtime::initialized() && Runtime::get().world_size() > 1;
  const int rank = mpi ? Runtime::get().world_rank() : 0;
  const int world = mpi ? Runtime::get().world_size() : 1;

  PreprocessReport report;
  std::vector<std::string> finals, parts, temps;
  for (const auto& key : options.json_keys) {
    finals.push_back(preprocess_output_prefix(options.output_prefix, key, options.split_sentences));
  }
  report.output_prefixes = finals;
  long long tag = static_cast<long long>(::getpid());
  if (mpi) TESSERA_MPI_CHECK(MPI_Bcast(&tag, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
  for (const auto& f : finals) {
    parts.push_back(hidden_sibling(f, mpi ? ".part" + std::to_string(rank) + "-" + std::to_string(tag) : ".tmp" + std::to_string(tag)));
    temps.push_back(hidden_sibling(f, ".tmp" + std::to_string(tag)));
  }

  std::exception_ptr failure;
  const auto start = Clock::now();
  try {
    const fs::path out_dir = fs::path(options.output_prefix).has_parent_path() ? fs::path(options.output_prefix).parent_path() : fs::path(".");
    if (!fs::is_directory(out_dir))
      TESSERA_CONFIG_FAIL("--output-prefix ", options.output_prefix, ": the directory ", out_dir.string(), " does not exist");
    std::error_code ec;
    if (fs::is_directory(options.input, ec))
      TESSERA_CONFIG_FAIL("--input ", options.input, " is a folder; give one JSONL file (or .jsonl.gz)");
    auto tokenizer = make_tokenizer(options.tokenizer);
    const IndexDType dtype = optimal_index_dtype(tokenizer->vocab_size());
    PreprocessInput input(options.input);
    const auto [begin, end] = rank_byte_range(input.text(), rank, world);
    encode_range(options, input, begin, end, parts, dtype, report);
  } catch (...) {
    failure = std::current_exception();
    for (const auto& p : parts) remove_pair(p);
  }
  if (mpi) {
    int failed = failure ? 1 : 0, any = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any) {
      for (const auto& p : parts) remove_pair(p);
      if (failure) std::rethrow_exception(failure);
      TESSERA_CONFIG_FAIL("stopping: another rank failed on ", options.input, " (its message says why)");
    }
    // Rank 0 merges the parts in rank order, then everyone removes its own part.
    std::exception_ptr merge_failure;
    if (rank == 0) {
      try {
        for (size_t k = 0; k < finals.size(); ++k) {
          std::vector<std::string> inputs;
          for (int r = 0; r < world; ++r) inputs.push_back(hidden_sibling(finals[k], ".part" + std::to_string(r) + "-" + std::to_string(tag)));
          merge_indexed_datasets(inputs, temps[k]);
        }
      } catch (...) {
        merge_failure = std::current_exception();
        for (const auto& t : temps) remove_pair(t);
      }
    }
    int merge_failed = merge_failure ? 1 : 0;
    TESSERA_MPI_CHECK(MPI_Bcast(&merge_failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
    for (const auto& p : parts) remove_pair(p);
    if (merge_failure) std::rethrow_exception(merge_failure);
    if (merge_failed) TESSERA_CONFIG_FAIL("stopping: rank 0 failed to merge the outputs (its message says why)");
    long long counts[3] = {report.documents, report.bad_lines, report.bytes}, totals[3] = {0, 0, 0};
    TESSERA_MPI_CHECK(MPI_Allreduce(counts, totals, 3, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    report.documents = totals[0];
    report.bad_lines = totals[1];
    report.bytes = totals[2];
    double slowest = 0.0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&report.seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    report.seconds = slowest;
  } else if (failure) {
    std::rethrow_exception(failure);
  }
  if (rank == 0) {
    try {
      for (size_t k = 0; k < finals.size(); ++k) {
        fs::rename(temps[k] + ".bin", finals[k] + ".bin");
        fs::rename(temps[k] + ".idx", finals[k] + ".idx");
      }
    } catch (const fs::filesystem_error& e) {
      for (size_t k = 0; k < finals.size(); ++k) remove_pair(temps[k]);
      TESSERA_FAIL("cannot move the output into place: ", e.what());
    }
  }
  if (mpi) TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  report.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace tessera::data
