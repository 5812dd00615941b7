// tessera-preprocess: JSONL (or .jsonl.gz) -> Megatron-compatible .bin/.idx, with the flags of
// Megatron's tools/preprocess_data.py; also --merge (tools/merge_datasets.py) and --inspect.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/preprocess.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"

namespace po = boost::program_options;
using namespace tessera;

namespace {

int inspect(const std::string& prefix) {
  data::IndexedDataset dataset(prefix);
  std::printf("%s: dtype %s (code %d), %lld sequences, %lld documents, %lld tokens%s\n", prefix.c_str(),
              data::index_dtype_name(dataset.dtype()), static_cast<int>(dataset.dtype()),
              static_cast<long long>(dataset.sequence_count()), static_cast<long long>(dataset.document_count()),
              static_cast<long long>(dataset.total_tokens()), dataset.has_modes() ? ", with sequence modes" : "");
  return 0;
}

int body(int argc, char** argv) {
  data::PreprocessOptions options;
  std::vector<std::string> merge_inputs;
  std::string inspect_prefix;
  po::options_description desc(
      "tessera-preprocess: tokenize a JSONL corpus (one JSON object a line) into Megatron-LM indexed datasets\n"
      "{output-prefix}_{key}_document.{bin,idx} (or _sentence with --split-sentences). Run under srun/mpirun\n"
      "to split the input over ranks by byte range; rank 0 merges the parts in rank order.\n\nOptions");
  desc.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the version and exit")
      ("input", po::value<std::string>(&options.input)->default_value("", "\"\""), "input JSONL file; a name ending in .gz is gunzipped")
      ("output-prefix", po::value<std::string>(&options.output_prefix)->default_value("", "\"\""), "prefix of the output files (required)")
      ("json-keys", po::value<std::vector<std::string>>(&options.json_keys)->multitoken()->default_value({"text"}, "text"),
       "JSON keys to encode, one output dataset per key")
      ("tokenizer-type", po::value<std::string>(&options.tokenizer.type)->default_value("GPT2BPETokenizer"),
       "GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase | SentencePieceTokenizer | NullTokenizer")
      ("tokenizer-model", po::value<std::string>(&options.tokenizer.tokenizer_model)->default_value("", "\"\""),
       "SentencePiece model file (SentencePieceTokenizer)")
      ("vocab-extra-ids", po::value<int64_t>(&options.tokenizer.vocab_extra_ids)->default_value(0),
       "sentinel tokens <extra_id_k> added to the vocabulary (T5: 100)")
      ("vocab-file", po::value<std::string>(&options.tokenizer.vocab_file)->default_value("", "\"\""), "tokenizer vocabulary file")
      ("merge-file", po::value<std::string>(&options.tokenizer.merge_file)->default_value("", "\"\""), "BPE merges file (GPT-2)")
      ("vocab-size", po::value<int64_t>(&options.tokenizer.vocab_size)->default_value(0), "vocabulary size (NullTokenizer only)")
      ("append-eod", po::bool_switch(&options.append_eod)->default_value(false), "append the end-of-document id to every document (needed for GPT; default: off)")
      ("split-sentences", po::bool_switch(&options.split_sentences)->default_value(false),
       "one sequence per sentence (simple rule-based English splitter, not NLTK punkt; default: off)")
      ("workers", po::value<int>(&options.workers)->default_value(1), "encoding threads per rank")
      ("skip-bad-lines", po::bool_switch(&options.skip_bad_lines)->default_value(false),
       "skip (count and report) malformed JSON lines and lines missing a key instead of failing (default: off)")
      ("log-interval", po::value<int64_t>(&options.log_interval)->default_value(1000),
       "documents between progress log lines (when stderr is not a terminal)")
      ("merge", po::value<std::vector<std::string>>(&merge_inputs)->multitoken()->default_value({}, "none"),
       "instead of encoding: concatenate these dataset prefixes into --output-prefix (.bin/.idx)")
      ("inspect", po::value<std::string>(&inspect_prefix)->default_value("", "\"\""),
       "instead of encoding: validate the dataset PREFIX (.idx/.bin) and print its summary");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL(e.what(), " (see tessera-preprocess --help)");
  }
  if (vm.count("help")) {
    if (log::is_output_rank()) std::cout << desc << "\n";
    return 0;
  }
  if (vm.count("version")) {
    if (log::is_output_rank()) std::cout << "tessera-preprocess " << TESSERA_VERSION << "\n";
    return 0;
  }
  if (!inspect_prefix.empty()) return inspect(inspect_prefix);
  if (!merge_inputs.empty()) {
    if (options.output_prefix.empty()) TESSERA_CONFIG_FAIL("--merge needs --output-prefix");
    if (Runtime::get().world_rank() == 0) data::merge_indexed_datasets(merge_inputs, options.output_prefix);
    log::info("merged ", merge_inputs.size(), " datasets into ", options.output_prefix, ".{bin,idx}");
    return 0;
  }
  if (options.input.empty()) TESSERA_CONFIG_FAIL("--input is required (see tessera-preprocess --help)");
  if (options.output_prefix.empty()) TESSERA_CONFIG_FAIL("--output-prefix is required (see tessera-preprocess --help)");
  if (options.log_interval < 1) TESSERA_CONFIG_FAIL("--log-interval = ", options.log_interval, ": must be at least 1");
  const data::PreprocessReport report = data::run_preprocess(options);
  const double mb = static_cast<double>(report.bytes) / 1e6;
  log::info("Processed ", report.documents, " documents, ", mb, " MB in ", report.seconds, " s: ",
            report.seconds > 0 ? mb / report.seconds : 0.0, " MB/s with ", options.workers, " worker(s) x ",
            Runtime::get().world_size(), " rank(s) (", report.wall_seconds, " s in all, with loading the tokenizer).");
  if (report.bad_lines > 0) log::warn("skipped ", report.bad_lines, " bad line(s) of ", options.input);
  for (const auto& prefix : report.output_prefixes) log::info("wrote ", prefix, ".bin and ", prefix, ".idx");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tessera::run_main(argc, argv, body); }
