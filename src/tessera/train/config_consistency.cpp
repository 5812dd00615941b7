#include "tessera/train/config_consistency.h"

#include <mpi.h>

#include <sstream>

#include "tessera/ckpt/collective_errors.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/mpi_communicator.h"
#include "tessera/runtime/runtime.h"

namespace tessera::train {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Rank 0's text on every rank (one character per i32 element: collectives carry numbers).
std::string broadcast_text(Communicator& comm, const std::string& text) {
  Buffer length_buffer(sizeof(int64_t));
  Tensor length = length_buffer.as_tensor(DType::i64, {1});
  *length.data_as<int64_t>() = static_cast<int64_t>(text.size());
  comm.broadcast(length, 0);
  const int64_t n = *length.data_as<int64_t>();
  Buffer chars_buffer(static_cast<size_t>(n + 1) * sizeof(int32_t));
  Tensor chars = chars_buffer.as_tensor(DType::i32, {n + 1});
  auto* c = chars.data_as<int32_t>();
  if (comm.rank() == 0)
    for (int64_t i = 0; i < n; ++i) c[i] = static_cast<unsigned char>(text[static_cast<size_t>(i)]);
  comm.broadcast(chars, 0);
  std::string out(static_cast<size_t>(n), ' ');
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<char>(c[i]);
  return out;
}

MpiCommunicator world_communicator() {
  Runtime& runtime = Runtime::get();
  std::vector<int> ranks(static_cast<size_t>(runtime.world_size()));
  for (int r = 0; r < runtime.world_size(); ++r) ranks[static_cast<size_t>(r)] = r;
  CommOptions options;
  options.timeout_seconds = 600;  // a rank that never arrives ends the job instead of hanging it
  return MpiCommunicator(MPI_COMM_WORLD, ranks, "world (config check)", options);
}

}  // namespace

std::string config_differences(const std::string& mine, const std::string& reference) {
  std::vector<std::string> a = lines_of(mine), b = lines_of(reference);
  std::string section, out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    std::string x = i < a.size() ? a[i] : std::string(), y = i < b.size() ? b[i] : std::string();
    if (!x.empty() && x.front() == '[') section = x.substr(1, x.find(']') - 1);
    if (x == y) continue;
    if (!out.empty()) out += "; ";
    out += (section.empty() ? "" : section + ".") + x + " (rank 0: " + y.substr(y.find('=') + 2) + ")";
  }
  return out;
}

Config load_config_on_all_ranks(const std::string& path, const std::vector<std::string>& overrides) {
  Runtime& runtime = Runtime::get();
  if (runtime.world_size() == 1) return load_config(path, overrides);
  MpiCommunicator world = world_communicator();
  Config config;
  ckpt::run_on_all_ranks_or_fail_together(world, [&] { config = load_config(path, overrides); });
  const std::string mine = config.to_toml();
  const std::string reference = broadcast_text(world, mine);
  ckpt::run_on_all_ranks_or_fail_together(world, [&] {
    if (mine != reference)
      TESSERA_CONFIG_FAIL("the resolved config of rank ", world.rank(), " differs from rank 0's: ",
                          config_differences(mine, reference),
                          "; every rank must get the same config file and --set options");
  });
  return config;
}

void validate_for_world_on_all_ranks(const Config& config) {
  Runtime& runtime = Runtime::get();
  if (runtime.world_size() == 1) return validate_for_world(config, 1);
  MpiCommunicator world = world_communicator();
  // The same config on every rank (load_config_on_all_ranks): the same verdict, reported once.
  ckpt::run_on_all_ranks_or_fail_together(world, [&] { validate_for_world(config, runtime.world_size()); });
}

}  // namespace tessera::train
