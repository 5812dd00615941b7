// GPTDataset tests: numpy-compatible shuffles, the split string, document/sample/shuffle indices
// (lengths, one-token overlap, epochs, permutations, seeds), index caches, and sample contents.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/gpt_dataset_cache.h"
#include "tessera/data/gpt_dataset_indices.h"
#include "tessera/data/gpt_dataset_split.h"
#include "tessera/data/indexed_dataset_builder.h"

using namespace tessera;
using namespace tessera::data;
using tessera::test::TempDir;

namespace {

std::vector<int64_t> permutation(uint32_t seed, int64_t n) {
  NumpyRandomState rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  rng.shuffle(std::span<int64_t>(v));
  return v;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t begin, int64_t end) {
  std::sort(v.begin(), v.end());
  if (static_cast<int64_t>(v.size()) != end - begin) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != begin + static_cast<int64_t>(i)) return false;
  return true;
}

// Documents of pseudo-random lengths (some empty) with ids that name their position.
std::vector<int32_t> make_lengths(int n, uint64_t seed) {
  RandomStream rs(seed, 7);
  std::vector<int32_t> lengths(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) lengths[static_cast<size_t>(i)] = i % 7 == 3 ? 0 : static_cast<int32_t>(1 + rs.below(static_cast<uint64_t>(i), 40));
  return lengths;
}

void build_dataset(const std::string& prefix, const std::vector<int32_t>& lengths) {
  IndexedDatasetBuilder builder(prefix + ".bin", IndexDType::int32);
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> tokens(static_cast<size_t>(lengths[d]));
    for (int32_t k = 0; k < lengths[d]; ++k) tokens[static_cast<size_t>(k)] = static_cast<int32_t>(d * 1000 + static_cast<size_t>(k));
    builder.add_item(tokens);
    builder.end_document();
  }
  builder.finalize(prefix + ".idx");
}

}  // namespace

TEST(NumpyRandomState, MatchesNumpyRandomState) {
  // std::mt19937 is MT19937 with init_genrand: the 10000th draw of the default seed is fixed by the C++ standard.
  std::mt19937 mt;
  mt.discard(9999);
  EXPECT_EQ(mt(), 4123659995u);
  // numpy.random.RandomState(0).random_sample() == 0.5488135039273248
  NumpyRandomState rng(0);
  EXPECT_DOUBLE_EQ(rng.random_sample(), 0.5488135039273248);
  // numpy.random.RandomState(0).permutation(10), RandomState(42).permutation(10)
  EXPECT_EQ(permutation(0, 10), (std::vector<int64_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(permutation(42, 10), (std::vector<int64_t>{8, 1, 5, 0, 7, 2, 9, 4, 3, 6}));
}

TEST(NumpyRandomState, IntervalStaysInRangeAndCoversIt) {
  NumpyRandomState rng(1234);
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 6000; ++i) {
    uint64_t v = rng.interval(5);
    ASSERT_LE(v, 5u);
    ++seen[v];
  }
  for (int c : seen) EXPECT_GT(c, 800);
  EXPECT_EQ(rng.interval(0), 0u);
  EXPECT_LE(rng.interval(uint64_t{1} << 40), uint64_t{1} << 40);
}

TEST(GPTSplit, ParsesAndNormalisesLikeMegatron) {
  auto w = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[1], 0.030);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  auto b = split_bookends(w);
  ASSERT_TRUE(b[0] && b[1] && b[2]);
  EXPECT_DOUBLE_EQ(b[1]->first, 0.969);
  EXPECT_DOUBLE_EQ(b[2]->second, 0.969 + 0.030 + 0.001);
  EXPECT_EQ(split_range(*b[0], 1000), (std::pair<int64_t, int64_t>{0, 969}));
  EXPECT_EQ(split_range(*b[1], 1000), (std::pair<int64_t, int64_t>{969, 999}));
  EXPECT_EQ(split_range(*b[2], 1000), (std::pair<int64_t, int64_t>{999, 1000}));

  auto one = split_bookends(parse_split("1"));  // padded with zeros: no valid/test split
  EXPECT_TRUE(one[0]);
  EXPECT_FALSE(one[1]);
  EXPECT_FALSE(one[2]);
  auto spaced = parse_split("98, 2");
  EXPECT_DOUBLE_EQ(spaced[0], 0.98);
  EXPECT_DOUBLE_EQ(spaced[2], 0.0);
  // Python's round() is half to even: round(2.5) = 2, round(3.5) = 4.
  EXPECT_EQ(split_range({0.0, 0.5}, 5).second, 2);
  EXPECT_EQ(split_range({0.0, 0.5}, 7).second, 4);
  EXPECT_THROW(parse_split("abc"), ConfigError);
  EXPECT_THROW(parse_split("0,0,0"), ConfigError);
  EXPECT_THROW(parse_split("1,2,3,4"), ConfigError);
  EXPECT_THROW(parse_split("1..2,3"), ConfigError);
}

TEST(GPTIndices, SamplesAreTheTokenStreamCutEverySeqLength) {
  const std::vector<int32_t> lengths = make_lengths(50, 3);
  std::vector<int32_t> documents(lengths.size());
  std::iota(documents.begin(), documents.end(), 0);
  const int64_t s = 16;
  int64_t tokens = 0;
  for (int32_t l : lengths) tokens += l;
  const int64_t requested = 3 * tokens / s;  // about three epochs
  GPTIndices idx = build_gpt_indices(lengths, documents, requested, s, 1234);
  EXPECT_GE(idx.num_samples(), requested);
  EXPECT_EQ(idx.num_epochs, (requested * s + 1 + tokens - 1) / tokens);
  // Every epoch covered: each document appears exactly num_epochs times.
  std::map<int32_t, int64_t> count;
  for (int32_t d : idx.document_index) ++count[d];
  ASSERT_EQ(count.size(), lengths.size());
  for (auto& [d, c] : count) EXPECT_EQ(c, idx.num_epochs) << "document " << d;
  // The flat token stream in document_index order, as (document, offset) pairs.
  std::vector<std::pair<int64_t, int64_t>> stream;
  for (int32_t d : idx.document_index)
    for (int32_t k = 0; k < lengths[static_cast<size_t>(d)]; ++k) stream.emplace_back(d, k);
  for (int64_t j = 0; j <= idx.num_samples(); ++j) {
    // sample_index[j] points at stream position j * s.
    const auto pos = idx.sample_index[2 * static_cast<size_t>(j)];
    const auto off = idx.sample_index[2 * static_cast<size_t>(j) + 1];
    ASSERT_LT(static_cast<size_t>(j * s), stream.size());
    EXPECT_EQ(stream[static_cast<size_t>(j * s)], (std::pair<int64_t, int64_t>{idx.document_index[static_cast<size_t>(pos)], off}))
        << "sample " << j;
  }
  // The shuffle index is a permutation.
  EXPECT_TRUE(is_permutation_of_range(idx.shuffle_index, 0, idx.num_samples()));
  // Same seed, same order; another seed, another order.
  GPTIndices again = build_gpt_indices(lengths, documents, requested, s, 1234);
  EXPECT_EQ(again.document_index, idx.document_index);
  EXPECT_EQ(again.shuffle_index, idx.shuffle_index);
  GPTIndices other = build_gpt_indices(lengths, documents, requested, s, 4321);
  EXPECT_NE(other.document_index, idx.document_index);
  EXPECT_NE(other.shuffle_index, idx.shuffle_index);
}

TEST(GPTIndices, SeparateLastEpochWhenItIsSmall) {
  const std::vector<int32_t> lengths = make_lengths(40, 5);
  std::vector<int32_t> documents(lengths.size());
  std::iota(documents.begin(), documents.end(), 0);
  const int64_t s = 8;
  int64_t T = 0;
  for (int32_t l : lengths) T += l;
  const int64_t per_epoch = (T - 1) / s;
  const int64_t before_final = (2 * T - 1) / s;
  const int64_t requested = before_final + per_epoch / 10;  // 3 epochs, final one barely used
  GPTIndices idx = build_gpt_indices(lengths, documents, requested, s, 99);
  ASSERT_EQ(idx.num_epochs, 3);
  ASSERT_TRUE(idx.separate_final_epoch);
  // The first 2 epochs are shuffled among themselves, the last epoch on its own.
  const size_t n = lengths.size();
  std::vector<int64_t> last(idx.document_index.end() - static_cast<std::ptrdiff_t>(n), idx.document_index.end());
  EXPECT_TRUE(is_permutation_of_range(last, 0, static_cast<int64_t>(n)));
  std::vector<int64_t> first(idx.shuffle_index.begin(), idx.shuffle_index.begin() + before_final);
  std::vector<int64_t> rest(idx.shuffle_index.begin() + before_final, idx.shuffle_index.end());
  EXPECT_TRUE(is_permutation_of_range(first, 0, before_final));
  EXPECT_TRUE(is_permutation_of_range(rest, before_final, idx.num_samples()));
  // With most of the final epoch used, it is not separated.
  GPTIndices whole = build_gpt_indices(lengths, documents, before_final + per_epoch - 1, s, 99);
  EXPECT_EQ(whole.num_epochs, 3);
  EXPECT_FALSE(whole.separate_final_epoch);
}

TEST(GPTDataset, SamplesHaveSeqLengthPlusOneTokensAndOverlapByOne) {
  TempDir dir;
  const std::vector<int32_t> lengths = make_lengths(60, 11);
  build_dataset(dir / "corpus", lengths);
  auto data = std::make_shared<IndexedDataset>(dir / "corpus");
  GPTDatasetConfig config;
  config.seq_length = 12;
  config.split = "8,2,0";
  config.cache_dir = dir / "cache";
  GPTDataset train(data, Split::train, 200, config);
  EXPECT_EQ(train.first_sequence(), 0);
  EXPECT_EQ(train.end_sequence(), 48);  // round(0.8 * 60)
  GPTDataset valid(data, Split::valid, 20, config);
  EXPECT_EQ(valid.first_sequence(), 48);
  EXPECT_THROW(GPTDataset(data, Split::test, 5, config), ConfigError);  // zero-weight split

  const auto& idx = train.indices();
  std::vector<int32_t> tokens(13), previous(13);
  std::vector<float> mask(12);
  for (int64_t j = 0; j < train.num_samples(); ++j) {
    // Sample i is stream sample shuffle_index[i]; find i for stream sample j.
    const auto it = std::find(idx.shuffle_index.begin(), idx.shuffle_index.end(), j);
    ASSERT_NE(it, idx.shuffle_index.end());
    train.sample(it - idx.shuffle_index.begin(), tokens, mask);
    for (int32_t t : tokens) EXPECT_LT(t / 1000, 48) << "train sample reads outside the train split";
    EXPECT_TRUE(std::all_of(mask.begin(), mask.end(), [](float m) { return m == 1.0f; }));
    if (j > 0) EXPECT_EQ(tokens.front(), previous.back()) << "samples " << j - 1 << " and " << j;
    previous = tokens;
  }
  // Wraps around past num_samples.
  std::vector<int32_t> wrapped(13);
  train.sample(train.num_samples() + 3, wrapped, mask);
  train.sample(3, tokens, mask);
  EXPECT_EQ(wrapped, tokens);
}

TEST(GPTDataset, IndexCacheIsReusedAndKeyedByTheDescription) {
  TempDir dir;
  build_dataset(dir / "corpus", make_lengths(30, 2));
  auto data = std::make_shared<IndexedDataset>(dir / "corpus");
  GPTDatasetConfig config;
  config.seq_length = 10;
  config.split = "1";
  // Default location: <prefix>/cache/GPTDataset_indices, next to the data.
  GPTDataset first(data, Split::train, 100, config);
  EXPECT_FALSE(first.loaded_from_cache());
  ASSERT_FALSE(first.cache_stem().empty());
  EXPECT_EQ(std::filesystem::path(first.cache_stem()).parent_path(),
            std::filesystem::path(dir / "corpus") / "cache" / "GPTDataset_indices");
  for (const char* part : {"-description.txt", "-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"})
    EXPECT_TRUE(std::filesystem::exists(first.cache_stem() + part)) << part;
  EXPECT_NE(first.cache_stem().find("-GPTDataset-train"), std::string::npos);
  GPTDataset second(data, Split::train, 100, config);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(second.indices().document_index, first.indices().document_index);
  EXPECT_EQ(second.indices().sample_index, first.indices().sample_index);
  EXPECT_EQ(second.indices().shuffle_index, first.indices().shuffle_index);
  config.seed = 7;
  GPTDataset reseeded(data, Split::train, 100, config);
  EXPECT_FALSE(reseeded.loaded_from_cache());
  EXPECT_NE(reseeded.cache_stem(), first.cache_stem());
  // The .npy files hold Megatron's dtypes.
  auto doc = read_npy(first.cache_stem() + "-document_index.npy");
  EXPECT_EQ(doc.descr, "<i4");
  auto sample = read_npy(first.cache_stem() + "-sample_index.npy");
  EXPECT_EQ(sample.shape, (std::vector<int64_t>{first.num_samples() + 1, 2}));
  EXPECT_EQ(read_npy(first.cache_stem() + "-shuffle_index.npy").descr, "<u4");
}
