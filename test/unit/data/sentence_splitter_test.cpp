// The rule-based sentence splitter of tessera-preprocess --split-sentences.
#include <gtest/gtest.h>

#include "tessera/data/preprocess_sentence_splitter.h"

using tessera::data::split_sentences;

TEST(SentenceSplitter, SplitsOnTerminatorsButNotAbbreviations) {
  auto s = split_sentences("It is a truth universally acknowledged. Mr. Bennet replied! Did he?  \"Yes,\" said she. e.g. not");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0], "It is a truth universally acknowledged.");
  EXPECT_EQ(s[1], "Mr. Bennet replied!");
  EXPECT_EQ(s[2], "Did he?");
  EXPECT_EQ(s[3], "\"Yes,\" said she. e.g. not");
}

TEST(SentenceSplitter, HandlesQuotesInitialsParagraphsAndEdges) {
  auto s = split_sentences("\"Go away!\" She left. J. Smith came at 3.5 o'clock.\n\nNew paragraph without stop\n\nEnd");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], "\"Go away!\"");
  EXPECT_EQ(s[1], "She left.");
  EXPECT_EQ(s[2], "J. Smith came at 3.5 o'clock.");
  EXPECT_EQ(s[3], "New paragraph without stop");
  EXPECT_EQ(s[4], "End");
  EXPECT_TRUE(split_sentences("   \n ").empty());
  EXPECT_EQ(split_sentences("no terminator").size(), 1u);
}
