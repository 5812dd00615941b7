// Issue 23 (smaller item): a small dataset with the default split "969,30,1" has an empty test
// split; training never reads it, so it is skipped with a warning instead of refusing the run.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/blended_dataset_builder.h"
#include "tessera/data/indexed_dataset_builder.h"

using namespace tessera;
using namespace tessera::data;

TEST(EmptyTestSplit, SmallDatasetWithTheDefaultSplitBuildsTrainAndValid) {
  tessera::test::TempDir dir;
  IndexedDatasetBuilder builder(dir / "small.bin", IndexDType::uint16);
  for (int d = 0; d < 40; ++d) {  // 40 documents: round(0.001 * 40) = 0 test documents
    std::vector<int32_t> tokens(static_cast<size_t>(30 + d % 7), 3);
    builder.add_item(tokens);
    builder.end_document();
  }
  builder.finalize(dir / "small.idx");
  GPTDatasetConfig config;
  config.seq_length = 16;
  config.split = "969,30,1";
  GPTDatasetSplits splits;
  ASSERT_NO_THROW(splits = build_gpt_datasets(parse_data_path({dir / "small"}), config, {100, 10, 10}));
  EXPECT_TRUE(splits.train);
  EXPECT_TRUE(splits.valid);
  EXPECT_FALSE(splits.test);
  config.split = "969,0,31";  // a non-empty test split is still built
  splits = build_gpt_datasets(parse_data_path({dir / "small"}), config, {100, 0, 10});
  EXPECT_TRUE(splits.test);
}
