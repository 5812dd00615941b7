// tessera-preprocess's engine: JSONL -> Megatron .bin/.idx per JSON key, encoded by worker
// threads in input order, over MPI ranks (byte ranges merged by rank 0), never leaving partial output.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

struct PreprocessOptions {
  std::string input;                          // .jsonl, or .jsonl.gz / any name ending in .gz
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  TokenizerOptions tokenizer;
  bool append_eod = false;
  bool split_sentences = false;               // rule-based, see preprocess_sentence_splitter.h
  bool skip_bad_lines = false;                // count and report bad lines instead of failing
  int workers = 1;                            // encoding threads per rank
  int64_t log_interval = 1000;                // documents between log lines (not on a terminal)
  size_t chunk_bytes = 64 * 1024;             // work unit of a thread (whole lines)
  bool progress = true;                       // progress bar (terminal) or log lines
};

struct PreprocessReport {
  int64_t documents = 0;      // over all ranks
  int64_t bad_lines = 0;      // skipped (only with skip_bad_lines)
  int64_t bytes = 0;          // input bytes (after gunzip) over all ranks
  double seconds = 0.0;       // encoding time, from all tokenizers loaded to outputs finalised (slowest rank)
  double wall_seconds = 0.0;  // the whole run, including loading tokenizers and merging
  std::vector<std::string> output_prefixes;  // one per key: {prefix}_{key}_{document|sentence}
};

// The output prefix of one key: {output_prefix}_{key}_document (or _sentence).
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key, bool split_sentences);

// Runs on every rank of MPI_COMM_WORLD when the Runtime is initialised with several ranks (a
// collective), else alone. Bad input is a ConfigError "FILE:LINE: what is wrong". On any failure
// no file is left under the final names and the temporaries are removed.
PreprocessReport run_preprocess(const PreprocessOptions& options);

}  // namespace tessera::data
