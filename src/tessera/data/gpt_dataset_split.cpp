#include "tessera/data/gpt_dataset_split.h"

#include <cctype>
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
  // Grammar: up to 3 non-negative decimal numbers separated by ',' (or '/', as Megatron accepts),
  // spaces allowed around them. Anything else ("1,-1,0", "1;2", "9x") is an error, not skipped.
  std::vector<double> numbers;
  size_t i = 0;
  while (true) {
    size_t sep = text.find_first_of(",/", i);
    std::string token = text.substr(i, sep == std::string::npos ? std::string::npos : sep - i);
    size_t first = token.find_first_not_of(" \t"), last = token.find_last_not_of(" \t");
    token = first == std::string::npos ? std::string() : token.substr(first, last - first + 1);
    bool digits = !token.empty() && token.find_first_not_of("0123456789.eE+") == std::string::npos &&
                  (std::isdigit(static_cast<unsigned char>(token[0])) || token[0] == '.');
    char* end = nullptr;
    double v = digits ? std::strtod(token.c_str(), &end) : 0.0;
    if (!digits || end != token.c_str() + token.size() || !std::isfinite(v))
      TESSERA_CONFIG_FAIL(key, " = \"", text, "\": \"", token,
                          "\" is not a non-negative number; write up to 3 weights (train,valid,test), e.g. \"969,30,1\"");
    numbers.push_back(v);
    if (sep == std::string::npos) break;
    i = sep + 1;
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
