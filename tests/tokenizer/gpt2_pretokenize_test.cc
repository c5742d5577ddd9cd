// GPT-2's pre-tokenizer against what its regex gives (Python `regex`
// module, the pattern in gpt2_pretokenize.h), case by case.
#include "src/tokenizer/gpt2_pretokenize.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::vector<std::string> Split(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view c : SplitGpt2Chunks(text)) out.emplace_back(c);
  return out;
}

struct Case {
  std::string text;
  std::vector<std::string> chunks;
};

TEST(Gpt2PretokenizeTest, TableOfCases) {
  const Case cases[] = {
      {"", {}},
      // Contractions: lower case only, anywhere, also at the very start.
      {"I'm", {"I", "'m"}},
      {"they'll", {"they", "'ll"}},
      {"'s at start", {"'s", " at", " start"}},
      {"we've we're he'd don't", {"we", "'ve", " we", "'re", " he", "'d", " don", "'t"}},
      {"'S IT'S", {"'", "S", " IT", "'", "S"}},  // upper case is no contraction
      {" 're", {" '", "re"}},
      {"x'''s", {"x", "'''", "s"}},
      // Numbers: a run of \p{N}, apart from letters.
      {"2024", {"2024"}},
      {"in 2024, abc123", {"in", " 2024", ",", " abc", "123"}},
      {"\xC2\xBD \xD9\xA3\xD9\xA4", {"\xC2\xBD", " \xD9\xA3\xD9\xA4"}},  // ½, Arabic-Indic 34
      // Unicode letters stay together; marks (Mn) are not letters.
      {"na\xC3\xAFve caf\xC3\xA9", {"na\xC3\xAFve", " caf\xC3\xA9"}},
      {"cafe\xCC\x81", {"cafe", "\xCC\x81"}},  // e + U+0301 COMBINING ACUTE
      {"\xE4\xBD\xA0\xE5\xA5\xBD \xE4\xB8\x96\xE7\x95\x8C",  // 你好 世界
       {"\xE4\xBD\xA0\xE5\xA5\xBD", " \xE4\xB8\x96\xE7\x95\x8C"}},
      {"\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82!",  // Привет!
       {"\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", "!"}},
      // Emoji (So, with a Sk skin tone) are "other", and join punctuation.
      {"hi \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!", {"hi", " \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!"}},
      {"a\xE2\x80\x94" "b", {"a", "\xE2\x80\x94", "b"}},  // em dash
      {"wait\xE2\x80\x94what?!", {"wait", "\xE2\x80\x94", "what", "?!"}},
      // Whitespace: the lookahead gives the last space of a run to what follows.
      {"a  b", {"a", " ", " b"}},
      {"a   b", {"a", "  ", " b"}},
      {"a   ", {"a", "   "}},
      {"\n\n", {"\n\n"}},
      {"a\n\nb", {"a", "\n", "\n", "b"}},
      {"a\n b", {"a", "\n", " b"}},
      {"a \n", {"a", " \n"}},
      {"\t\tx", {"\t", "\t", "x"}},
      {"  !", {" ", " !"}},
      // Unicode white space (NBSP, ideographic space) is \s but never the
      // optional leading space.
      {"a\xC2\xA0" "b", {"a", "\xC2\xA0", "b"}},
      {"a\xC2\xA0\xC2\xA0" "b", {"a", "\xC2\xA0", "\xC2\xA0", "b"}},
      {"x\xE3\x80\x80y", {"x", "\xE3\x80\x80", "y"}},
      // U+001C..U+001F are not White_Space: "other".
      {"a\x1c" "b", {"a", "\x1c", "b"}},
      // Invalid UTF-8: each bad byte is an "other" code point.
      {"ab\xFF\xFE" "cd", {"ab", "\xFF\xFE", "cd"}},
      {"\xC3x", {"\xC3", "x"}},                     // truncated sequence
      {"x \xE2\x82", {"x", " \xE2\x82"}},           // truncated at the end
      {"\xED\xA0\x80", {"\xED\xA0\x80"}},           // a surrogate: three bad bytes
      {"\xC0\xAF!", {"\xC0\xAF!"}},                 // overlong
      {std::string("a\0b", 3), {"a", std::string("\0", 1), "b"}},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Split(c.text), ElementsAreArray(c.chunks)) << "text: '" << c.text << "'";
  }
}

TEST(Gpt2PretokenizeTest, AgreesWithLaddersRuleOnAscii) {
  // The two rules differ only beyond ASCII.
  EXPECT_THAT(Split("Hello world's  end\n\nOK 123abc!! ?"),
              ElementsAre("Hello", " world", "'s", " ", " end", "\n", "\n", "OK", " 123", "abc",
                          "!!", " ?"));
  EXPECT_THAT(Split("a  \n  b"), ElementsAre("a", "  \n ", " b"));
}

TEST(Gpt2PretokenizeTest, ChunksPartitionAnyBytes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const size_t len = rng() % 64;
    for (size_t i = 0; i < len; ++i) text += static_cast<char>(rng() % 256);
    std::string joined;
    for (absl::string_view c : SplitGpt2Chunks(text)) {
      ASSERT_FALSE(c.empty());
      joined.append(c.data(), c.size());
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace ladder
