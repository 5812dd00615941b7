#include "tessera/data/gpt_dataset_split.h"

#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::data {

const char* split_name(Split split) {
  switch (split) {
    case Split::train: return "train";
    case Split::valid: return "valid";
    case Split::test: return "test";
  }
  return "?";
}

std::array<double, 3> parse_split(const std::string& text, const std::string& key) {
  std::vector<double> numbers;
  size_t i = 0;
  while (i < text.size()) {
    auto is_num = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!is_num(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && is_num(text[j])) ++j;
    const std::string token = text.substr(i, j - i);
    char* end = nullptr;
    double v = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size())
      TESSERA_CONFIG_FAIL(key, " = \"", text, "\": \"", token, "\" is not a number; write e.g. \"969,30,1\"");
    numbers.push_back(v);
    i = j;
  }
  if (numbers.empty() || numbers.size() > 3)
    TESSERA_CONFIG_FAIL(key, " = \"", text, "\": expected 1 to 3 non-negative weights (train,valid,test), e.g. \"969,30,1\"");
  numbers.resize(3, 0.0);
  double sum = 0.0;
  for (double v : numbers) sum += v;
  if (!(sum > 0.0)) TESSERA_CONFIG_FAIL(key, " = \"", text, "\": the weights sum to 0; at least one must be positive");
  return {numbers[0] / sum, numbers[1] / sum, numbers[2] / sum};
}

SplitBookends split_bookends(const std::array<double, 3>& weights) {
  SplitBookends out;
  double begin = 0.0;
  for (size_t i = 0; i < 3; ++i) {
    double end = begin + weights[i];
    if (end > begin) out[i] = std::make_pair(begin, end);
    begin = end;
  }
  return out;
}

std::pair<int64_t, int64_t> split_range(const std::pair<double, double>& bookend, int64_t num_elements) {
  // std::nearbyint rounds half to even in the default rounding mode, as Python's round().
  const int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double n = static_cast<double>(num_elements);
  auto first = static_cast<int64_t>(std::nearbyint(bookend.first * n));
  auto second = static_cast<int64_t>(std::nearbyint(bookend.second * n));
  std::fesetround(saved);
  return {first, second};
}

}  // namespace tessera::data
