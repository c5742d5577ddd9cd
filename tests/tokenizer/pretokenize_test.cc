#include "src/tokenizer/pretokenize.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

std::vector<std::string> Split(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view c : SplitChunks(text)) out.emplace_back(c);
  return out;
}

// Expected chunks are what GPT-2's regex (Python `regex` module) gives.
TEST(PretokenizeTest, MatchesGpt2Regex) {
  using ::testing::ElementsAre;
  EXPECT_THAT(Split("Hello world's  end\n\nOK 123abc!! ?"),
              ElementsAre("Hello", " world", "'s", " ", " end", "\n", "\n", "OK", " 123", "abc",
                          "!!", " ?"));
  EXPECT_THAT(Split("don't  stop'll 're\t\tx \n"),
              ElementsAre("don", "'t", " ", " stop", "'ll", " '", "re", "\t", "\t", "x", " \n"));
  EXPECT_THAT(Split("a  \n  b"), ElementsAre("a", "  \n ", " b"));
  EXPECT_THAT(Split("x'''s '' 'S"), ElementsAre("x", "'''", "s", " ''", " '", "S"));
  EXPECT_THAT(Split(" 42.5%  \t"), ElementsAre(" 42", ".", "5", "%", "  \t"));
  EXPECT_THAT(Split(""), ElementsAre());
}

TEST(PretokenizeTest, NonAsciiBytesAreLetters) {
  using ::testing::ElementsAre;
  EXPECT_THAT(Split("caf\xc3\xa9 \xe2\x82\xac"
                    "5"),
              ElementsAre("caf\xc3\xa9", " \xe2\x82\xac", "5"));
}

TEST(PretokenizeTest, ChunksPartitionAnyBytes) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>((i * 7919 + i / 13) % 256);
  std::string joined;
  for (absl::string_view c : SplitChunks(text)) {
    EXPECT_FALSE(c.empty());
    joined += std::string(c);
  }
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace ladder
