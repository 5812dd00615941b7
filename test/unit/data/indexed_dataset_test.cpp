// Indexed dataset (.bin/.idx) tests: builder -> reader round trip for every dtype, idx_inspect.py
// agreement, hand-built Megatron bytes (uint16, int32, empty documents), merge, and bad files.
#include <gtest/gtest.h>

#include <cstring>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "shared_fixture.h"
#include "test_paths.h"

using namespace tessera;
using namespace tessera::data;
using tessera::test::TempDir;

namespace {

// Documents of sequences; {} is an empty document.
using Documents = std::vector<std::vector<std::vector<int32_t>>>;

Documents sample_documents() {
  return {{{1, 2, 3}, {4}}, {}, {{5, 6, 7, 8, 9}}, {{10}, {}, {11, 12}}, {}, {{13, 14}}};
}

void build(const std::string& prefix, IndexDType dtype, const Documents& docs) {
  IndexedDatasetBuilder builder(prefix + ".bin", dtype);
  for (const auto& doc : docs) {
    std::vector<int32_t> tokens;
    std::vector<int64_t> lengths;
    for (const auto& seq : doc) {
      tokens.insert(tokens.end(), seq.begin(), seq.end());
      lengths.push_back(static_cast<int64_t>(seq.size()));
    }
    builder.add_document(tokens, lengths);
  }
  builder.finalize(prefix + ".idx");
}

std::vector<int64_t> flat(const std::vector<std::vector<int32_t>>& doc) {
  std::vector<int64_t> out;
  for (const auto& s : doc) out.insert(out.end(), s.begin(), s.end());
  return out;
}

template <typename T>
void append(std::string& bytes, T v) {
  bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// An independent writer: the Megatron .idx layout spelled out byte by byte.
void write_by_hand(const std::string& prefix, uint8_t code, size_t item, const std::vector<std::vector<int64_t>>& seqs,
                   const std::vector<int64_t>& doc_indices) {
  std::string idx("MMIDIDX\0\0", 9), bin;
  append<uint64_t>(idx, 1);
  append<uint8_t>(idx, code);
  append<uint64_t>(idx, seqs.size());
  append<uint64_t>(idx, doc_indices.size());
  for (const auto& s : seqs) append<int32_t>(idx, static_cast<int32_t>(s.size()));
  int64_t pointer = 0;
  for (const auto& s : seqs) {
    append<int64_t>(idx, pointer);
    pointer += static_cast<int64_t>(s.size() * item);
  }
  for (int64_t d : doc_indices) append<int64_t>(idx, d);
  for (const auto& s : seqs)
    for (int64_t v : s) {
      if (item == 2) append<uint16_t>(bin, static_cast<uint16_t>(v));
      else append<int32_t>(bin, static_cast<int32_t>(v));
    }
  tessera::test::write_file(prefix + ".idx", idx);
  tessera::test::write_file(prefix + ".bin", bin);
}

std::string config_error_message(const std::string& prefix) {
  try {
    IndexedDataset d(prefix);
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(IndexedDatasetDType, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_index_dtype(50257), IndexDType::uint16);
  EXPECT_EQ(optimal_index_dtype(65499), IndexDType::uint16);
  EXPECT_EQ(optimal_index_dtype(65500), IndexDType::int32);
  EXPECT_EQ(optimal_index_dtype(128000), IndexDType::int32);
  EXPECT_EQ(static_cast<int>(IndexDType::uint16), 8);
  EXPECT_EQ(static_cast<int>(IndexDType::int32), 4);
  EXPECT_EQ(index_dtype_size(IndexDType::float64), 8u);
  EXPECT_THROW(index_dtype_from_code(9, "x.idx"), ConfigError);
  EXPECT_THROW(index_dtype_from_code(0, "x.idx"), ConfigError);
}

TEST(IndexedDataset, RoundTripEveryDtypeWithEmptyDocuments) {
  TempDir dir;
  const Documents docs = sample_documents();
  for (uint8_t code = 1; code <= 8; ++code) {
    const std::string prefix = dir / ("ds" + std::to_string(code));
    build(prefix, static_cast<IndexDType>(code), docs);
    IndexedDataset ds(prefix);
    EXPECT_EQ(static_cast<int>(ds.dtype()), code);
    EXPECT_EQ(ds.document_count(), static_cast<int64_t>(docs.size()));
    EXPECT_EQ(ds.sequence_count(), 7);
    EXPECT_EQ(ds.total_tokens(), 14);
    for (size_t d = 0; d < docs.size(); ++d) EXPECT_EQ(ds.document(static_cast<int64_t>(d)), flat(docs[d])) << "dtype " << int(code);
    EXPECT_EQ(ds.document_index(1), ds.document_index(2));  // document 1 is empty
    std::vector<int32_t> part(3);
    ds.read(2, 1, 3, part.data());  // sequence 2 = {5,6,7,8,9}: elements 1..3
    EXPECT_EQ(part, (std::vector<int32_t>{6, 7, 8}));
    // .bin size is the token count times the item size.
    EXPECT_EQ(std::filesystem::file_size(prefix + ".bin"), 14 * index_dtype_size(static_cast<IndexDType>(code)));
  }
}

TEST(IndexedDataset, BuilderRejectsIdsThatDoNotFitTheDtype) {
  TempDir dir;
  IndexedDatasetBuilder builder(dir / "x.bin", IndexDType::uint16);
  std::vector<int32_t> tokens{70000};
  EXPECT_THROW(builder.add_item(tokens), ConfigError);
}

TEST(IndexedDataset, IdxInspectAgreesWithTessera) {
  TempDir dir;
  const std::string prefix = dir / "corpus";
  const Documents docs = sample_documents();
  build(prefix, IndexDType::uint16, docs);
  const std::string tool = (tessera::test::shared_dir() / "tools" / "idx_inspect.py").string();
  TESSERA_REQUIRE_SHARED_FILE(tool);
  auto summary = tessera::test::run_command("python3 " + tool + " " + prefix);
  EXPECT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_EQ(summary.output.find("ERROR"), std::string::npos) << summary.output;
  EXPECT_NE(summary.output.find("sequences 7 documents 6 tokens 14 trailing_bytes 0"), std::string::npos) << summary.output;
  IndexedDataset ds(prefix);
  for (int64_t d = 0; d < ds.document_count(); ++d) {
    auto r = tessera::test::run_command("python3 " + tool + " " + prefix + " --doc " + std::to_string(d));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string expected;
    for (int64_t v : ds.document(d)) expected += (expected.empty() ? "" : " ") + std::to_string(v);
    EXPECT_EQ(r.output, expected + "\n") << "document " << d;
  }
}

TEST(IndexedDataset, ReadsHandBuiltUint16AndInt32FilesWithEmptyDocuments) {
  TempDir dir;
  // Documents: [7 65535 | 0], [], [3], [] (an empty document at the end too).
  const std::vector<std::vector<int64_t>> seqs16 = {{7, 65535}, {0}, {3}};
  write_by_hand(dir / "u16", 8, 2, seqs16, {0, 2, 2, 3, 3});
  IndexedDataset u16(dir / "u16");
  EXPECT_EQ(u16.dtype(), IndexDType::uint16);
  EXPECT_EQ(u16.document_count(), 4);
  EXPECT_EQ(u16.document(0), (std::vector<int64_t>{7, 65535, 0}));
  EXPECT_TRUE(u16.document(1).empty());
  EXPECT_EQ(u16.document(2), (std::vector<int64_t>{3}));
  EXPECT_TRUE(u16.document(3).empty());

  const std::vector<std::vector<int64_t>> seqs32 = {{100000, -1, 2147483647}, {}, {5, 6}};
  write_by_hand(dir / "i32", 4, 4, seqs32, {0, 0, 1, 3});
  IndexedDataset i32(dir / "i32");
  EXPECT_EQ(i32.dtype(), IndexDType::int32);
  EXPECT_EQ(i32.sequence_count(), 3);
  EXPECT_TRUE(i32.document(0).empty());
  EXPECT_EQ(i32.document(1), (std::vector<int64_t>{100000, -1, 2147483647}));
  EXPECT_EQ(i32.document(2), (std::vector<int64_t>{5, 6}));  // an empty sequence then {5, 6}
  EXPECT_EQ(i32.sequence_length(1), 0);

  // And our builder writes exactly these bytes.
  IndexedDatasetBuilder builder(dir / "ours.bin", IndexDType::uint16);
  std::vector<int32_t> t0{7, 65535, 0}, t2{3};
  std::vector<int64_t> l0{2, 1}, l2{1};
  builder.add_document(t0, l0);
  builder.end_document();
  builder.add_document(t2, l2);
  builder.end_document();
  builder.finalize(dir / "ours.idx");
  EXPECT_EQ(tessera::test::read_file(dir / "ours.idx"), tessera::test::read_file(dir / "u16.idx"));
  EXPECT_EQ(tessera::test::read_file(dir / "ours.bin"), tessera::test::read_file(dir / "u16.bin"));
}

TEST(IndexedDataset, MergeConcatenatesDocumentsInOrder) {
  TempDir dir;
  const Documents a = sample_documents();
  const Documents b = {{{20, 21}}, {}, {{22}, {23, 24}}};
  build(dir / "a", IndexDType::uint16, a);
  build(dir / "b", IndexDType::uint16, b);
  merge_indexed_datasets({dir / "a", dir / "b"}, dir / "ab");
  IndexedDataset ab(dir / "ab");
  ASSERT_EQ(ab.document_count(), static_cast<int64_t>(a.size() + b.size()));
  for (size_t d = 0; d < a.size(); ++d) EXPECT_EQ(ab.document(static_cast<int64_t>(d)), flat(a[d]));
  for (size_t d = 0; d < b.size(); ++d) EXPECT_EQ(ab.document(static_cast<int64_t>(a.size() + d)), flat(b[d]));
  // Mixing dtypes is refused and leaves nothing under the output prefix.
  build(dir / "c", IndexDType::int32, b);
  EXPECT_THROW(merge_indexed_datasets({dir / "a", dir / "c"}, dir / "ac"), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir / "ac.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ac.idx"));
  for (const auto& name : dir.entries()) EXPECT_EQ(name.find("merge-tmp"), std::string::npos) << name;
}

TEST(IndexedDataset, BadFilesAreConfigErrorsNamingTheFile) {
  TempDir dir;
  const std::string good = dir / "good";
  build(good, IndexDType::uint16, sample_documents());
  const std::string idx = tessera::test::read_file(good + ".idx");
  const std::string bin = tessera::test::read_file(good + ".bin");
  auto variant = [&](const std::string& name, std::string idx_bytes, std::string bin_bytes) {
    tessera::test::write_file(dir / (name + ".idx"), idx_bytes);
    tessera::test::write_file(dir / (name + ".bin"), bin_bytes);
    return dir / name;
  };
  std::string bad_magic = idx;
  bad_magic[0] = 'X';
  std::string msg = config_error_message(variant("magic", bad_magic, bin));
  EXPECT_NE(msg.find("magic.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;

  std::string bad_version = idx;
  bad_version[9] = 2;
  msg = config_error_message(variant("version", bad_version, bin));
  EXPECT_NE(msg.find("version.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;

  msg = config_error_message(variant("truncbin", idx, bin.substr(0, bin.size() - 2)));
  EXPECT_NE(msg.find("truncbin.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  std::string bad_pointer = idx;
  const size_t pointer1 = kIndexHeaderBytes + 4 * 7 + 8;  // sequence 1's pointer (7 sequences)
  bad_pointer[pointer1] = 99;
  msg = config_error_message(variant("pointer", bad_pointer, bin));
  EXPECT_NE(msg.find("pointer.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pointer mismatch"), std::string::npos) << msg;

  msg = config_error_message(variant("truncidx", idx.substr(0, idx.size() - 5), bin));
  EXPECT_NE(msg.find("truncidx.idx"), std::string::npos) << msg;

  msg = config_error_message(dir / "missing");
  EXPECT_NE(msg.find("missing.idx"), std::string::npos) << msg;
}
