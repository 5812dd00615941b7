// tessera-config: the questionnaire that writes a tessera-train config (like `accelerate config`),
// or the same config without questions (--defaults), and the sbatch line that runs it.
#include <boost/program_options.hpp>
#include <iostream>

#include "launch.h"
#include "questions.h"
#include "tessera/core/error.h"
#include "tessera/train/config.h"
#include "toml_writer.h"
#include "validation.h"

namespace po = boost::program_options;
using namespace tessera::config_app;

namespace {

int config_main(int argc, char** argv) {
  po::options_description options("tessera-config options");
  options.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "output,o", po::value<std::string>()->default_value(""), "config file to write (empty: asked, tessera.toml)")(
      "input,i", po::value<std::string>()->default_value(""),
      "existing config to edit: its values are the defaults (empty: the schema's defaults)")(
      "defaults", "ask nothing: take every default (needs --output), then apply --set")(
      "set", po::value<std::vector<std::string>>()->composing()->default_value({}, ""),
      "set a config key, table.key=value (repeatable; with --defaults after the defaults, else before the questions)")(
      "nodes", po::value<int64_t>()->default_value(1), "machines (the questionnaire's first default)")(
      "gpus-per-node", po::value<int64_t>()->default_value(8), "GPUs per node, 0: CPU-only")(
      "cpu-ranks-per-node", po::value<int64_t>()->default_value(4), "ranks per node of a CPU-only run");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL("tessera-config: ", e.what(), "; see tessera-config --help");
  }
  if (vm.count("help")) {
    std::cout << "Usage: tessera-config [--output FILE.toml] [--input EXISTING.toml]   # questionnaire\n"
              << "       tessera-config --defaults --output FILE.toml [--set table.key=value ...]\n\n"
              << "Writes a config that tessera-train --config FILE.toml accepts and prints the sbatch line\n"
              << "that runs it. Every config key and its default: tessera-train --help.\n\n"
              << options;
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "tessera-config " << TESSERA_VERSION << "\n";
    return 0;
  }
  Session session = default_session();
  session.nodes = vm["nodes"].as<int64_t>();
  session.gpus_per_node = vm["gpus-per-node"].as<int64_t>();
  session.cpu_ranks_per_node = vm["cpu-ranks-per-node"].as<int64_t>();
  if (session.nodes < 1 || session.gpus_per_node < 0 || session.cpu_ranks_per_node < 1)
    TESSERA_CONFIG_FAIL("tessera-config: --nodes and --cpu-ranks-per-node must be >= 1, --gpus-per-node >= 0");
  session.output = vm["output"].as<std::string>();
  const std::string input = vm["input"].as<std::string>();
  if (!input.empty()) load_existing(session, input);
  const bool defaults = vm.count("defaults") > 0;
  if (defaults && session.output.empty()) TESSERA_CONFIG_FAIL("tessera-config --defaults needs --output FILE.toml");
  const auto& overrides = vm["set"].as<std::vector<std::string>>();
  if (!defaults)
    for (const auto& o : overrides) tessera::train::apply_override(o, session.values);

  QuestionnaireOptions questionnaire;
  questionnaire.ask_existing_config = input.empty();
  questionnaire.ask_output = session.output.empty();
  questionnaire.take_defaults = defaults;
  Terminal terminal(std::cin, std::cout);
  if (!defaults)
    terminal.say("tessera-config " + std::string(TESSERA_VERSION) +
                 ": answer each question, or press Enter for the default in brackets.");
  run_questionnaire(session, terminal, questionnaire);
  if (defaults)
    for (const auto& o : overrides) tessera::train::apply_override(o, session.values);

  // A family's own layer defaults (t5: relative, rmsnorm, relu, no biases) where the schema default stands.
  for (const auto& [key, value] :
       tessera::train::architecture_layer_defaults(std::get<std::string>(session.values.at("model.architecture")))) {
    const auto dot = key.find('.');
    if (session.values.at(key) == tessera::train::find_key(key.substr(0, dot), key.substr(dot + 1))->default_value)
      session.values[key] = value;
  }
  write_config(session, session.output);
  check_whole(session, session.output);  // as tessera-train will load it, with the world size
  std::cout << "wrote " << session.output << "\n";
  for (const auto& note : unsupported_notes(session)) std::cout << "note: " << note << "\n";
  std::cout << "run it with:\n  " << sbatch_line(session, session.output) << "\n"
            << "or on this machine:\n  " << mpirun_line(session, session.output) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return config_main(argc, argv);
  } catch (const tessera::Error& e) {
    std::cerr << "error: " << e.message() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
