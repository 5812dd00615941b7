#include "tessera/data/preprocess_input.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"

#if __has_include(<zlib.h>)
#include <zlib.h>
#define TESSERA_HAVE_ZLIB 1
#endif

namespace tessera::data {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

PreprocessInput::PreprocessInput(const std::string& path) : path_(path) {
  if (!ends_with(path, ".gz")) {
    mapped_ = MappedFile(path);
    return;
  }
#ifdef TESSERA_HAVE_ZLIB
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) TESSERA_CONFIG_FAIL(path, ": cannot open: ", std::strerror(errno));
  gzbuffer(gz, 1 << 20);
  std::string out;
  std::vector<char> buffer(1 << 20);
  while (true) {
    int n = gzread(gz, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(gz, &code);
      gzclose(gz);
      TESSERA_CONFIG_FAIL(path, ": not a valid gzip file: ", message);
    }
    if (n == 0) break;
    out.append(buffer.data(), static_cast<size_t>(n));
  }
  int code = Z_OK;
  std::string message = gzerror(gz, &code);
  gzclose(gz);
  if (code != Z_OK) TESSERA_CONFIG_FAIL(path, ": not a valid gzip file: ", message);
  inflated_ = std::move(out);
  from_gzip_ = true;
#else
  TESSERA_CONFIG_FAIL(path, ": .gz input needs zlib, and this Tessera was built without it; gunzip the file first");
#endif
}

size_t align_to_line_start(std::string_view text, size_t position) {
  if (position == 0) return 0;
  if (position >= text.size()) return text.size();
  const void* nl = std::memchr(text.data() + position - 1, '\n', text.size() - (position - 1));
  return nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1 : text.size();
}

std::pair<size_t, size_t> rank_byte_range(std::string_view text, int rank, int world_size) {
  const auto size = static_cast<unsigned __int128>(text.size());
  auto at = [&](int r) {
    return align_to_line_start(text, static_cast<size_t>(size * static_cast<unsigned>(r) / static_cast<unsigned>(world_size)));
  };
  return {at(rank), at(rank + 1)};
}

int64_t line_number_at(std::string_view text, size_t position) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(position, text.size())), '\n');
}

}  // namespace tessera::data
