// Real T5 data end to end on the data side: tessera-preprocess --split-sentences with the
// SentencePieceTokenizer (share/tokenizers/t5-austen) writes a sentence dataset, T5Dataset reads it
// with the tokenizer's pad / decoder start / </s> / sentinels, and one sample round-trips through
// the tokenizer: its uncorrupted text decodes to the document's sentences and its encoder input
// reads with <extra_id_k> in place of whole-word spans.
#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "data/t5_test_util.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/t5_dataset.h"
#include "tessera/data/tokenizer_sentencepiece.h"
#include "test_paths.h"

namespace tessera {
namespace {

std::string preprocess_binary() {
  const auto from_env = test::bin_dir() / "tessera-preprocess";
  if (std::filesystem::exists(from_env)) return from_env.string();
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "tessera-preprocess").string();
}

TEST(T5SentencePieceData, PreprocessedSentencesRoundTripThroughTheTokenizer) {
  if (!data::SentencePieceTokenizer::available_in_this_build())
    GTEST_SKIP() << "AddressSanitizer build: the SentencePiece shim needs RTLD_DEEPBIND";
  const std::string model = (test::source_dir() / "share/tokenizers/t5-austen/spiece.model").string();
  test::TempDir dir;
  const std::string text =
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of "
      "a wife. However little known the feelings or views of such a man may be on his first entering a "
      "neighbourhood, this truth is so well fixed in the minds of the surrounding families. He is considered the "
      "rightful property of some one or other of their daughters.";
  test::write_file(dir / "in.jsonl", "{\"text\": \"" + text + "\"}\n");
  const auto r = test::run_command(preprocess_binary() + " --input " + (dir / "in.jsonl") + " --output-prefix " +
                                   (dir / "austen") + " --tokenizer-type SentencePieceTokenizer --tokenizer-model " +
                                   model + " --vocab-extra-ids 100 --split-sentences");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto indexed = std::make_shared<const data::IndexedDataset>(dir / "austen_text_sentence");
  ASSERT_EQ(indexed->document_count(), 1);
  ASSERT_EQ(indexed->document_index(1), 3) << "three sentences";
  data::SentencePieceTokenizer tok(model, 100);
  data::T5DatasetConfig c;
  c.seq_length = 128;
  c.decoder_seq_length = 48;
  c.short_seq_prob = 0;
  c.num_samples = 20;
  c.pad = tok.pad();
  c.bos = tok.decoder_start();
  c.eos = tok.eos();
  c.sentinels = tok.additional_special_token_ids();
  c.continuation.resize(static_cast<size_t>(tok.vocab_size()));
  for (int64_t id = 0; id < tok.vocab_size(); ++id)
    c.continuation[static_cast<size_t>(id)] = tok.continues_word(static_cast<int32_t>(id));
  data::T5Dataset d(indexed, 0, 1, c, "austen");
  for (int64_t i = 0; i < 20; ++i) {
    const auto s = test::read_t5(d, i);
    const auto layout = test::check_t5_layout(s, c.sentinels, c.pad, c.bos, c.eos);
    ASSERT_FALSE(layout.spans.empty());
    // The whole document fits (126 tokens or fewer): the text decodes to it.
    EXPECT_EQ(tok.detokenize(layout.text), text) << i;
    const std::string encoder =
        tok.detokenize(std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(layout.encoder_length)));
    EXPECT_NE(encoder.find("<extra_id_0>"), std::string::npos) << encoder;
    for (const auto& span : layout.spans)
      EXPECT_FALSE(tok.continues_word(span.front())) << "a span starts a word: " << tok.id_to_token(span.front());
  }
}

}  // namespace
}  // namespace tessera
