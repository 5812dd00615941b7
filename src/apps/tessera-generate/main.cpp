// tessera-generate: text generation from a Tessera checkpoint or a Hugging Face folder, as a batch
// CLI (prompts in, JSON Lines out) or an HTTP server (--serve), on one rank or TP x PP ranks.
#include <boost/program_options.hpp>
#include <fstream>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/generate/generator.h"
#include "tessera/generate/model_loader.h"
#include "tessera/generate/prompts_io.h"
#include "tessera/generate/server.h"
#include "tessera/generate/t5_generator.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"

namespace po = boost::program_options;
using namespace tessera;

namespace {

// The prompts of --prompts-file, then every --prompt.
std::vector<generate::Prompt> gather_prompts(const std::string& prompts_file, const std::vector<std::string>& texts,
                                             const data::Tokenizer* tokenizer, bool add_bos, int64_t eod) {
  std::vector<generate::Prompt> prompts;
  if (!prompts_file.empty()) prompts = generate::read_prompts_file(prompts_file, tokenizer, add_bos, eod);
  for (const auto& t : texts) prompts.push_back(generate::text_prompt(t, tokenizer, add_bos, eod, "--prompt"));
  return prompts;
}

// One row per prompt (generate::output_row) into --output, or else onto rows_fd (the original stdout).
void write_rows(const std::vector<generate::Prompt>& prompts, const std::vector<generate::GenerationResult>& results,
                const data::Tokenizer* tokenizer, const std::string& output, int rows_fd) {
  std::string text;
  for (size_t i = 0; i < prompts.size(); ++i) text += generate::output_row(prompts[i], results[i], tokenizer) + "\n";
  if (!output.empty()) {
    std::ofstream file(output);
    file << text;
    file.flush();
    if (!file) TESSERA_CONFIG_FAIL("--output ", output, ": cannot write");
    return;
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(rows_fd, text.data() + done, text.size() - done);
    if (n <= 0) TESSERA_FAIL("writing the output to stdout failed");
    done += static_cast<size_t>(n);
  }
}

int generate_main(int argc, char** argv) {
  po::options_description options("tessera-generate options");
  options.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "load", po::value<std::string>()->default_value(""), "Tessera checkpoint folder or Hugging Face model folder (default: the config's checkpoint.load)")(
      "config,c", po::value<std::string>()->default_value(""), "TOML config file (parallel, training.device, data)")(
      "set", po::value<std::vector<std::string>>()->composing()->default_value({}, ""),
      "override a config key: --set table.key=value (repeatable)")(
      "prompt", po::value<std::vector<std::string>>()->composing()->default_value({}, ""), "a text prompt (repeatable)")(
      "prompts-file", po::value<std::string>()->default_value(""), "JSON Lines: {\"prompt\": ...} or {\"prompt_ids\": [...]}")(
      "max-new-tokens", po::value<int64_t>()->default_value(32), "tokens to generate per prompt")(
      "greedy", "greedy decoding (the default unless a sampling option is given)")(
      "temperature", po::value<double>(), "sampling temperature")("top-k", po::value<int64_t>(), "top-k sampling")(
      "top-p", po::value<double>(), "top-p (nucleus) sampling")("top-p-decay", po::value<double>()->default_value(0.0),
                                                                 "top_p *= decay after each token")(
      "top-p-bound", po::value<double>()->default_value(0.0), "lower bound of the decayed top_p")(
      "seed", po::value<uint64_t>()->default_value(1234), "sampling seed")(
      "num-beams", po::value<int64_t>()->default_value(1), "beam search with this many beams")(
      "length-penalty", po::value<double>()->default_value(1.0), "beam search length penalty")(
      "add-bos", "prepend the end-of-document token to every prompt (Megatron's add_BOS)")(
      "stop-token", po::value<int64_t>(), "stop a sequence at this token (default: the end-of-document token)")(
      "no-stop", "never stop early")("no-cuda-graphs", "run every decode step's kernels eagerly (one GPU)")("no-kv-cache", "recompute every token each step (reference path)")(
      "output,o", po::value<std::string>()->default_value(""), "write JSON Lines here (default: stdout)")(
      "serve", "run the HTTP server (PUT /api) instead of a batch")(
      "random-init", "no checkpoint: random weights, model keys from --config/--set (benchmarks)")(
      "warmup", po::value<int64_t>()->default_value(0), "first generate this many tokens untimed (benchmarks)")(
      "host", po::value<std::string>()->default_value("127.0.0.1"), "server address")(
      "port", po::value<int>()->default_value(5000), "server port");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL(e.what(), "; see tessera-generate --help");
  }
  if (vm.count("help")) {
    if (log::is_output_rank())
      std::cout << "Usage: tessera-generate --load CKPT (--prompt TEXT ... | --prompts-file F.jsonl) [options]\n"
                   "       tessera-generate --load CKPT --serve [--host 127.0.0.1] [--port 5000]\n\n"
                << options;
    return 0;
  }
  if (vm.count("version")) {
    if (log::is_output_rank()) std::cout << "tessera-generate " << TESSERA_VERSION << "\n";
    return 0;
  }
  const bool serve = vm.count("serve") > 0;
  // Without --output the JSON Lines go to stdout: keep the real stdout for them and send everything
  // else printed there (log lines) to stderr.
  int rows_fd = -1;
  if (!serve && vm["output"].as<std::string>().empty() && Runtime::get().world_rank() == 0) {
    std::fflush(stdout);
    rows_fd = dup(STDOUT_FILENO);
    if (rows_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) TESSERA_FAIL("redirecting stdout failed");
  }
  const auto& texts = vm["prompt"].as<std::vector<std::string>>();
  const std::string prompts_file = vm["prompts-file"].as<std::string>();
  if (!serve && texts.empty() == prompts_file.empty())
    TESSERA_CONFIG_FAIL("give prompts with --prompt TEXT (repeatable) or --prompts-file F.jsonl (one of them), or --serve");

  // --load, else the config's checkpoint.load (jobs/generate.sbatch passes a training-style config).
  std::string load = vm["load"].as<std::string>();
  if (load.empty() && !vm["config"].as<std::string>().empty() && !vm.count("random-init"))
  {
    auto sets = vm["set"].as<std::vector<std::string>>();
    sets.push_back("data.mock_data=true");  // only checkpoint.load is read here
    sets.push_back("data.vocab_size=1");
    load = train::load_config(vm["config"].as<std::string>(), sets).checkpoint.load;
  }
  auto setup = generate::load_for_generation(load, vm["config"].as<std::string>(),
                                             vm["set"].as<std::vector<std::string>>(), vm.count("random-init") > 0);
  if (setup->t5) {  // encoder-decoder: greedy only, one rank (generate/t5_generator.h)
    if (serve) TESSERA_CONFIG_FAIL("--serve is not supported for model.architecture = t5 (batch generation only)");
    generate::GenerationRequest request;
    request.max_new_tokens = vm["max-new-tokens"].as<int64_t>();
    if (vm.count("temperature") || vm.count("top-k") || vm.count("top-p")) request.sampling.top_k = 0;
    request.num_beams = vm["num-beams"].as<int64_t>();
    request.stop_token = vm.count("no-stop") ? -1 : vm.count("stop-token") ? vm["stop-token"].as<int64_t>() : setup->eod;
    const data::Tokenizer* tokenizer = setup->tokenizer.get();
    const auto prompts = gather_prompts(prompts_file, texts, tokenizer, false, setup->eod);
    for (const auto& p : prompts) request.prompts.push_back(p.ids);
    generate::validate_t5(request, setup->t5->vocab_size(), "tessera-generate");
    write_rows(prompts, generate::t5_greedy(*setup->t5, request), tokenizer, vm["output"].as<std::string>(), rows_fd);
    return 0;
  }
  const int64_t pad = setup->eod >= 0 ? setup->eod : 0;
  generate::Generator generator(*setup->gpt, *setup->context, setup->config.parallel, pad,
                                vm.count("no-cuda-graphs") == 0);
  const bool root = Runtime::get().world_rank() == 0;

  if (serve) {
    if (!root) {
      while (generator.follow()) {
      }
      return 0;
    }
    generate::ServerOptions server;
    server.host = vm["host"].as<std::string>();
    server.port = vm["port"].as<int>();
    generate::serve(server, generator, setup->tokenizer.get(), setup->gpt->vocab_size(), setup->eod);
    generator.stop_followers();
    return 0;
  }
  if (!root) {
    while (generator.follow()) {
    }
    return 0;
  }

  generate::GenerationRequest request;
  request.max_new_tokens = vm["max-new-tokens"].as<int64_t>();
  const bool sampling = vm.count("temperature") || vm.count("top-k") || vm.count("top-p");
  if (sampling && vm.count("greedy")) TESSERA_CONFIG_FAIL("--greedy cannot be combined with --temperature/--top-k/--top-p");
  request.sampling.top_k = sampling ? (vm.count("top-k") ? vm["top-k"].as<int64_t>() : 0) : 1;
  request.sampling.top_p = vm.count("top-p") ? vm["top-p"].as<double>() : 0.0;
  request.sampling.temperature = vm.count("temperature") ? vm["temperature"].as<double>() : 1.0;
  request.sampling.top_p_decay = vm["top-p-decay"].as<double>();
  request.sampling.top_p_bound = vm["top-p-bound"].as<double>();
  request.sampling.seed = vm["seed"].as<uint64_t>();
  request.num_beams = vm["num-beams"].as<int64_t>();
  request.length_penalty = vm["length-penalty"].as<double>();
  request.stop_token = vm.count("no-stop") ? -1 : vm.count("stop-token") ? vm["stop-token"].as<int64_t>() : setup->eod;
  request.use_kv_cache = vm.count("no-kv-cache") == 0;
  const bool add_bos = vm.count("add-bos") > 0;
  if (add_bos && setup->eod < 0) TESSERA_CONFIG_FAIL("--add-bos needs an end-of-document token (a tokenizer or HF eos_token_id)");

  const data::Tokenizer* tokenizer = setup->tokenizer.get();
  const auto prompts = gather_prompts(prompts_file, texts, tokenizer, add_bos, setup->eod);
  for (const auto& p : prompts) request.prompts.push_back(p.ids);
  try {
    generate::validate(request, setup->gpt->vocab_size(), generator.max_length(), "tessera-generate");
  } catch (...) {
    generator.stop_followers();
    throw;
  }
  if (const int64_t warmup = vm["warmup"].as<int64_t>(); warmup > 0) {
    generate::GenerationRequest first = request;
    first.max_new_tokens = std::min(warmup, request.max_new_tokens);
    generator.run(first);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto results = generator.run(request);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  generator.stop_followers();
  int64_t new_tokens = 0;
  for (const auto& r : results) new_tokens += static_cast<int64_t>(r.output_ids.size()) - r.prompt_length;
  log::info("{\"benchmark\": \"tessera-generate\", \"batch\": ", results.size(), ", \"new_tokens\": ", new_tokens,
            ", \"seconds\": ", seconds, ", \"tok_s\": ", seconds > 0 ? new_tokens / seconds : 0.0, "}");
  write_rows(prompts, results, tokenizer, vm["output"].as<std::string>(), rows_fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, generate_main); }
