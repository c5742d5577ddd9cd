// TextStream: deltas are always valid UTF-8, never split a character, never
// show a stop string or anything after it, and do not depend on how the
// bytes were split into tokens.
#include "src/serve/text_stream.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Feeds `pieces` one at a time; all deltas concatenated (with Finish).
std::string Feed(const std::vector<std::string>& pieces, const std::vector<std::string>& stops,
                 std::vector<std::string>* deltas = nullptr, bool* stopped = nullptr) {
  TextStream s(nullptr, stops);
  std::string all;
  for (const std::string& p : pieces) {
    std::string d = s.PushBytes(p);
    if (deltas) deltas->push_back(d);
    all += d;
  }
  all += s.Finish();
  if (stopped) *stopped = s.stopped();
  return all;
}

bool ValidUtf8(const std::string& s) {
  TextStream t(nullptr, {});
  std::string out = t.PushBytes(s);
  out += t.Finish();
  return out == s;
}

TEST(TextStreamTest, HoldsBackSplitCharacters) {
  // é (2 bytes), € (3), 😀 (4), each split across byte-level tokens.
  const Tokenizer bytes = Tokenizer::ByteLevel();
  TextStream s(&bytes, {});
  EXPECT_EQ(s.Push('a'), "a");
  EXPECT_EQ(s.Push(0xC3), "");
  EXPECT_EQ(s.Push(0xA9), "\xC3\xA9");
  EXPECT_EQ(s.Push(0xE2), "");
  EXPECT_EQ(s.Push(0x82), "");
  EXPECT_EQ(s.Push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(s.PushBytes("\xF0\x9F"), "");
  EXPECT_EQ(s.PushBytes("\x98\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(s.Finish(), "");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStreamTest, StopStringSpanningTokens) {
  std::vector<std::string> deltas;
  bool stopped = false;
  EXPECT_EQ(Feed({"abcE", "N", "Dxyz", "more"}, {"END"}, &deltas, &stopped), "abc");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(deltas, (std::vector<std::string>{"abc", "", "", ""}));
}

TEST(TextStreamTest, ReleasesAHeldPrefixThatDoesNotComplete) {
  std::vector<std::string> deltas;
  bool stopped = true;
  EXPECT_EQ(Feed({"xE", "N", "x"}, {"END"}, &deltas, &stopped), "xENx");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(deltas, (std::vector<std::string>{"x", "", "ENx"}));
  // Finish flushes a held prefix.
  EXPECT_EQ(Feed({"xEN"}, {"END"}), "xEN");
}

TEST(TextStreamTest, StopAtTheVeryStart) {
  std::vector<std::string> deltas;
  bool stopped = false;
  EXPECT_EQ(Feed({"STOP", "after"}, {"STOP"}, &deltas, &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(Feed({"S", "TOP"}, {"STOP"}, nullptr, &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(TextStreamTest, SeveralStopStringsEarliestWins) {
  bool stopped = false;
  EXPECT_EQ(Feed({"1xy", "ab"}, {"xyz", "ab"}, nullptr, &stopped), "1xy");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(Feed({"xbya"}, {"a", "b"}), "x");
  EXPECT_EQ(Feed({"hello\n<|us", "er|>\nnext"}, {"\n<|user|>", "\n<|system|>"}), "hello");
  // A multi-byte stop string split inside its characters.
  EXPECT_EQ(Feed({"ok\xE2\x82", "\xAC\xE2", "\x82\xAC"}, {"\xE2\x82\xAC\xE2\x82\xAC"}), "ok");
}

TEST(TextStreamTest, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(Feed({"a\xFF"}, {}), "a" + kFffd);
  EXPECT_EQ(Feed({"\xC3", "("}, {}), kFffd + "(");
  EXPECT_EQ(Feed({"\xC0\xAF"}, {}), kFffd + kFffd);                          // overlong
  EXPECT_EQ(Feed({"\xED\xA0\x80"}, {}), kFffd + kFffd + kFffd);              // surrogate
  EXPECT_EQ(Feed({"\xF4\x90\x80\x80"}, {}), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(Feed({"\xE2\x82"}, {}), kFffd);  // truncated at the end: one U+FFFD
  EXPECT_EQ(Feed({"\xE2\x82", "x"}, {}), kFffd + "x");
  // An invalid byte is emitted at once, not held.
  TextStream s(nullptr, {});
  EXPECT_EQ(s.PushBytes("\x80"), kFffd);
}

TEST(TextStreamTest, OutputDoesNotDependOnTheSplit) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"ab", "\xC3\xA9z", "q\xFF"};
  const std::string alphabet = "abzq \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xFF\x80";
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    const std::string whole = Feed({text}, stops);
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    std::vector<std::string> deltas;
    EXPECT_EQ(Feed(pieces, stops, &deltas), whole) << "trial " << trial;
    for (const std::string& d : deltas) EXPECT_TRUE(ValidUtf8(d)) << "trial " << trial;
    EXPECT_TRUE(ValidUtf8(whole));
  }
}

}  // namespace
}  // namespace ladder
