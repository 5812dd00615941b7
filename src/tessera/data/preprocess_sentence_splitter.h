// A simple rule-based English sentence splitter for tessera-preprocess --split-sentences (in
// place of Megatron's NLTK punkt): not a trained model, documented rules only.
#pragma once
#include <string_view>
#include <vector>

namespace tessera::data {

// Splits after '.', '!' or '?' (runs of them, then any closing quotes/brackets) when whitespace
// follows and the next word starts with an uppercase letter, a digit or an opening quote/bracket;
// never after a known abbreviation (Mr. Mrs. Dr. St. etc. e.g. i.e. ...) or a single-letter
// initial ("J. Smith"). A blank line (paragraph break) always ends a sentence. Sentences are
// returned without surrounding whitespace; empty ones are dropped.
std::vector<std::string_view> split_sentences(std::string_view text);

}  // namespace tessera::data
