// The --split string ("969,30,1") as Megatron reads it: numbers normalised to sum 1, turned into
// train/valid/test book-ends, and the element range [round(beg*N), round(end*N)) of each split.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace tessera::data {

enum class Split : int { train = 0, valid = 1, test = 2 };
const char* split_name(Split split);  // "train" | "valid" | "test"

// All numbers ([.0-9]+ runs) of the string, padded with 0 to three, divided by their sum.
// ConfigError (naming `key`) if there is no number, more than three, or they sum to 0.
std::array<double, 3> parse_split(const std::string& text, const std::string& key = "data.split");

using SplitBookends = std::array<std::optional<std::pair<double, double>>, 3>;
// Cumulative book-ends; a split of zero width is nullopt (that split is not built).
SplitBookends split_bookends(const std::array<double, 3>& weights);

// Elements [first, second) of a dataset of `num_elements` that the split exposes. Rounding is
// Python's round(): half to even.
std::pair<int64_t, int64_t> split_range(const std::pair<double, double>& bookend, int64_t num_elements);

}  // namespace tessera::data
