// reshard: a Tessera checkpoint -> the same checkpoint at another TP / PP / virtual PP / DP layout
// (the distributed optimizer's state re-split over the new DP size, or dropped with no_optim) and
// optionally another params dtype; progress, scheduler and RNG seed are kept.
#pragma once
#include <filesystem>
#include <optional>

#include "tessera/convert/convert_options.h"
#include "tessera/convert/writer_ranks.h"

namespace tessera::convert {

struct ReshardResult {
  std::filesystem::path folder;
  int64_t tensors = 0;
};

// With several `ranks` (every one calls it), each reads and writes only the tensors of its files
// (writer_ranks.h).
ReshardResult reshard(const std::filesystem::path& input, std::optional<int64_t> iteration,
                      const std::filesystem::path& output, const LayoutOptions& layout, bool no_optim,
                      const WriterRanks& ranks = {});

}  // namespace tessera::convert
