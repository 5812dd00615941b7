#include "tessera/ckpt/piece_index.h"

#include <algorithm>
#include <map>
#include <string>

#include "tessera/ckpt/data_checksum.h"
#include "tessera/ckpt/h5_verified_read.h"

namespace tessera::ckpt {

namespace {

constexpr const char* kAttribute = "piece_index";
constexpr int64_t kVersion = 1;
// An attribute of a file in HDF5's earliest format must fit one 64 KiB object header message: the
// words go into parts of at most 4096 (32 KiB), "piece_index", "piece_index_1", "piece_index_2", ...
constexpr size_t kPartWords = 4096;

constexpr int64_t kMaxRank = 8;
constexpr size_t kMaxWordsPerPiece = 10 + 2 * (1 + kMaxRank);  // ten fixed words, two shapes

std::string part_name(size_t part) { return part == 0 ? kAttribute : kAttribute + ("_" + std::to_string(part)); }

int64_t words_checksum(const std::vector<int64_t>& words, size_t count) {
  return static_cast<int64_t>(data_checksum(words.data(), count * sizeof(int64_t)));
}

void put_shape(std::vector<int64_t>& words, const Shape& shape) {
  words.push_back(static_cast<int64_t>(shape.size()));
  words.insert(words.end(), shape.begin(), shape.end());
}

// Reads words [begin, end) in order; false where a piece runs past the end or holds an impossible value.
class WordReader {
 public:
  WordReader(const std::vector<int64_t>& words, size_t begin, size_t end) : words_(words), end_(end), at_(begin) {}
  bool next(int64_t& out) {
    if (at_ >= end_) return false;
    out = words_[at_++];
    return true;
  }
  bool shape(Shape& out) {
    int64_t rank = 0;
    if (!next(rank) || rank < 0 || rank > kMaxRank) return false;
    out.resize(static_cast<size_t>(rank));
    for (int64_t& d : out)
      if (!next(d) || d < 0) return false;
    return true;
  }
  bool done() const { return at_ == end_; }

 private:
  const std::vector<int64_t>& words_;
  size_t end_, at_;
};

bool read_piece(WordReader& in, haddr_t& address, StoredPiece& p) {
  int64_t addr = 0, dtype = 0, sliced = 0, checksum = 0;
  if (!in.next(addr) || !in.next(dtype) || dtype < 0 || dtype >= static_cast<int64_t>(kStoredDtypes.size()))
    return false;
  address = static_cast<haddr_t>(addr);
  p.dtype = kStoredDtypes[static_cast<size_t>(dtype)];
  if (!in.next(p.stored_count) || !in.next(p.split_axis) || !in.next(p.split_offset) || !in.next(sliced) ||
      !in.next(p.flat_offset) || !in.next(p.count) || !in.next(p.data_offset) || !in.next(checksum))
    return false;
  p.sliced = sliced != 0;
  p.checksum8 = static_cast<uint64_t>(checksum);
  return p.stored_count >= 0 && p.data_offset >= -1 && in.shape(p.global_shape) && in.shape(p.local_shape);
}

}  // namespace

StoredPiece describe_stored_piece(hid_t dataset) {
  StoredPiece p;
  p.dtype = h5_dataset_dtype(dataset);
  const std::vector<int64_t> global = h5_attr_ints(dataset, "global_shape"), local = h5_attr_ints(dataset, "local_shape");
  p.global_shape = Shape(global.begin(), global.end());
  p.local_shape = Shape(local.begin(), local.end());
  p.split_axis = h5_attr_int(dataset, "split_axis");
  p.split_offset = h5_attr_int(dataset, "split_offset");
  p.sliced = h5_has_attr(dataset, "flat_offset");
  p.flat_offset = p.sliced ? h5_attr_int(dataset, "flat_offset") : 0;
  p.count = p.sliced ? h5_attr_int(dataset, "count") : 0;
  p.stored_count = shape_numel(h5_dataset_shape(dataset));
  if (h5_has_attr(dataset, "checksum8")) {
    p.data_offset = h5_direct_offset(dataset, p.dtype, static_cast<size_t>(p.stored_count) * dtype_size(p.dtype));
    if (p.data_offset >= 0) p.checksum8 = static_cast<uint64_t>(h5_attr_int(dataset, "checksum8"));
  }
  return p;
}

void write_piece_index(hid_t group) {
  const std::vector<H5Link> links = h5_list_links(group);
  std::vector<int64_t> words = {kVersion, static_cast<int64_t>(links.size())};
  for (const H5Link& link : links) {
    H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(group, link.name.c_str(), H5P_DEFAULT), "dataset ", link.name));
    const StoredPiece p = describe_stored_piece(dataset.get());
    const auto listed = std::find(kStoredDtypes.begin(), kStoredDtypes.end(), p.dtype);
    TESSERA_CHECK(listed != kStoredDtypes.end(), "dataset ", link.name, ": dtype ", dtype_name(p.dtype),
                  " has no piece index code");
    const int64_t dtype = listed - kStoredDtypes.begin();
    words.insert(words.end(), {static_cast<int64_t>(link.address), dtype, p.stored_count, p.split_axis,
                               p.split_offset, p.sliced ? 1 : 0, p.flat_offset, p.count, p.data_offset,
                               static_cast<int64_t>(p.checksum8)});
    put_shape(words, p.global_shape);
    put_shape(words, p.local_shape);
  }
  words.push_back(words_checksum(words, words.size()));
  for (size_t part = 0; h5_has_attr(group, part_name(part)); ++part)  // an earlier index
    TESSERA_H5_CHECK(H5Adelete(group, part_name(part).c_str()), "attribute ", part_name(part));
  for (size_t part = 0, begin = 0; begin < words.size(); ++part, begin += kPartWords) {
    const auto first = words.begin() + static_cast<std::ptrdiff_t>(begin);
    h5_set_attr(group, part_name(part), std::vector<int64_t>(first, first + static_cast<std::ptrdiff_t>(
                                                                            std::min(kPartWords, words.size() - begin))));
  }
}

std::optional<std::vector<StoredPiece>> read_piece_index(hid_t group, const std::vector<H5Link>& links) {
  if (!h5_has_attr(group, kAttribute)) return std::nullopt;
  const size_t most = 3 + links.size() * kMaxWordsPerPiece;  // more words than any index of these links
  std::vector<int64_t> words;
  for (size_t part = 0; words.size() <= most && h5_has_attr(group, part_name(part)); ++part) {
    const std::vector<int64_t> more = h5_attr_ints(group, part_name(part));
    words.insert(words.end(), more.begin(), more.end());
  }
  if (words.size() < 3 || words[0] != kVersion || words[1] != static_cast<int64_t>(links.size()) ||
      words.back() != words_checksum(words, words.size() - 1))
    return std::nullopt;
  std::map<haddr_t, StoredPiece> by_address;
  WordReader in(words, 2, words.size() - 1);  // after the version and the count, before the checksum
  for (size_t i = 0; i < links.size(); ++i) {
    haddr_t address = HADDR_UNDEF;
    StoredPiece p;
    if (!read_piece(in, address, p)) return std::nullopt;
    by_address[address] = std::move(p);
  }
  if (!in.done() || by_address.size() != links.size()) return std::nullopt;
  std::vector<StoredPiece> pieces;
  for (const H5Link& link : links) {
    auto it = by_address.find(link.address);
    if (link.address == HADDR_UNDEF || it == by_address.end()) return std::nullopt;
    pieces.push_back(it->second);
  }
  return pieces;
}

}  // namespace tessera::ckpt
