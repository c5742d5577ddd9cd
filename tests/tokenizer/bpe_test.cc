#include "src/tokenizer/bpe.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Merge = std::pair<int32_t, int32_t>;

// Random byte strings that stress the pre-tokenizer: words, digits,
// punctuation, whitespace runs, apostrophes, NULs and invalid UTF-8.
std::string RandomBytes(std::mt19937& rng, size_t max_len) {
  static const std::string kPieces[] = {"the",      " the",     "'s",       "'ll",
                                        "  ",       "\n\n",     "\t",       "123",
                                        "!!",       "\xc3\xa9", "\xff\xfe", std::string(1, '\0'),
                                        "\xe2\x82", "a",        " ",        "'"};
  std::string s;
  const size_t len = rng() % (max_len + 1);
  while (s.size() < len) {
    if (rng() % 2) {
      s += kPieces[rng() % std::size(kPieces)];
    } else {
      s += static_cast<char>(rng() % 256);
    }
  }
  return s;
}

// A few hundred made-up words with skewed frequencies, some punctuation.
std::string SampleText() {
  std::mt19937 rng(7);
  std::vector<std::string> words;
  for (int i = 0; i < 300; ++i) {
    std::string w;
    for (size_t len = 2 + rng() % 7; w.size() < len;) w += static_cast<char>('a' + rng() % 26);
    if (i % 10 == 0) w += (i % 20 == 0) ? "," : "'s";
    words.push_back(w);
  }
  std::string text;
  for (int i = 0; i < 5000; ++i) {
    text += words[std::min(rng() % words.size(), rng() % words.size())];
    text += (rng() % 10 == 0) ? "\n" : " ";
  }
  return text;
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(BpeTest, ByteLevelIsBytes) {
  Tokenizer tok = Tokenizer::ByteLevel();
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_TRUE(tok.merges().empty());
  EXPECT_THAT(tok.Encode("a\xff"), ElementsAre(97, 255));
  EXPECT_EQ(tok.TokenBytes(65), "A");
}

TEST(BpeTest, Vocab256HasNoMerges) {
  auto tok = Tokenizer::Train(SampleText(), 256);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_TRUE(tok->merges().empty());
}

TEST(BpeTest, RejectsVocabBelow256) {
  auto tok = Tokenizer::Train("abc", 255);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
}

// aaabdaaabac: pairs aa:4 ab:2 ... -> aa=256; then (256,a) and (a,b) tie at 2
// and the smaller pair (a,b) wins -> 257; (256,257):2 -> 258; then all pairs
// count 1 and the smallest, (a,c), wins -> 259.
TEST(BpeTest, TrainsExpectedMerges) {
  auto tok = Tokenizer::Train("aaabdaaabac", 260);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(tok->merges(),
              ElementsAre(Merge(97, 97), Merge(97, 98), Merge(256, 257), Merge(97, 99)));
  EXPECT_EQ(tok->TokenBytes(258), "aaab");
  EXPECT_THAT(tok->Encode("aaabdaaabac"), ElementsAre(258, 100, 258, 259));
}

TEST(BpeTest, LeadingSpaceJoinsTheWord) {
  // Chunks "ab", " ab", " ab": (a,b) occurs 3 times, then (' ', ab) twice.
  auto tok = Tokenizer::Train("ab ab ab", 258);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(tok->merges(), ElementsAre(Merge(97, 98), Merge(32, 256)));
  EXPECT_THAT(tok->Encode("ab ab"), ElementsAre(256, 257));
}

TEST(BpeTest, MergesNeverCrossChunks) {
  auto tok = Tokenizer::Train("a1a1a1 . . .", 300);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // Only " ." repeats inside a chunk.
  EXPECT_THAT(tok->merges(), ElementsAre(Merge(32, 46)));
}

TEST(BpeTest, StopsWhenNothingIsLeftToMerge) {
  auto tok = Tokenizer::Train("abab", 1000);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(tok->merges(), ElementsAre(Merge(97, 98), Merge(256, 256)));
  EXPECT_EQ(tok->vocab_size(), 258);
}

TEST(BpeTest, TrainingIsDeterministicAndCompresses) {
  const std::string text = SampleText();
  auto a = Tokenizer::Train(text, 600);
  auto b = Tokenizer::Train(text, 600);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->merges(), b->merges());
  EXPECT_EQ(a->vocab_size(), 600);
  EXPECT_LT(a->Encode(text).size(), text.size() / 2);
}

TEST(BpeTest, RoundTripsArbitraryBytes) {
  std::mt19937 rng(42);
  auto trained = Tokenizer::Train(SampleText() + RandomBytes(rng, 2000), 600);
  ASSERT_TRUE(trained.ok()) << trained.status();
  const Tokenizer bytes = Tokenizer::ByteLevel();
  const Tokenizer* trained_ptr = &*trained;
  for (const Tokenizer* tok : {trained_ptr, &bytes}) {
    for (int i = 0; i < 300; ++i) {
      const std::string s = RandomBytes(rng, 300);
      const std::vector<int32_t> ids = tok->Encode(s);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      auto back = tok->Decode(ids);
      ASSERT_TRUE(back.ok()) << back.status();
      ASSERT_EQ(*back, s);
    }
  }
}

TEST(BpeTest, DecodeNamesBadId) {
  Tokenizer tok = Tokenizer::ByteLevel();
  auto s = tok.Decode({1, 256});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("256"));
  EXPECT_FALSE(tok.Decode({-1}).ok());
}

TEST(BpeTest, SaveLoadRoundTrip) {
  const std::string text = SampleText();
  auto tok = Tokenizer::Train(text, 300);
  ASSERT_TRUE(tok.ok());
  const std::string path = TempPath("roundtrip.bpe");
  ASSERT_TRUE(tok->Save(path).ok());
  auto loaded = Tokenizer::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->merges(), tok->merges());
  EXPECT_EQ(loaded->vocab_size(), 300);
  EXPECT_EQ(loaded->Encode(text), tok->Encode(text));

  ASSERT_TRUE(Tokenizer::ByteLevel().Save(path).ok());
  auto bytes = Tokenizer::Load(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->vocab_size(), 256);
}

TEST(BpeTest, LoadRejectsCorruptFilesNamingFileAndLine) {
  const std::string path = TempPath("corrupt.bpe");
  const std::pair<std::string, std::string> cases[] = {
      {"", ":1: empty file"},
      {"gpt-bpe 1\nvocab_size 256\n", ":1: not a ladder tokenizer file"},
      {"ladder-bpe 2\nvocab_size 256\n", ":1: unsupported version 2"},
      {"ladder-bpe 1\nvocab 256\n", ":2: expected 'vocab_size N'"},
      {"ladder-bpe 1\nvocab_size 12\n", ":2: vocab_size 12 outside"},
      {"ladder-bpe 1\nvocab_size 258\n97 98\n", ":4: vocab_size 258 needs 2 merge lines, found 1"},
      {"ladder-bpe 1\nvocab_size 257\n97 98\n1 2\n", ":4: vocab_size 257 needs 1"},
      {"ladder-bpe 1\nvocab_size 258\n97 98\n256 x\n", ":4: expected a merge"},
      {"ladder-bpe 1\nvocab_size 258\n97 98\n256 257\n", ":4: merge 256 257 creates id 257"},
      {"ladder-bpe 1\nvocab_size 258\n97 98\n97 98\n", ":4: duplicate merge 97 98"},
  };
  for (const auto& [text, message] : cases) {
    WriteText(path, text);
    auto tok = Tokenizer::Load(path);
    ASSERT_FALSE(tok.ok()) << text;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tok.status().message(), HasSubstr(path + message)) << text;
  }
}

TEST(BpeTest, LoadMissingFileNamesIt) {
  auto tok = Tokenizer::Load(TempPath("no-such.bpe"));
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("no-such.bpe"));
}

}  // namespace
}  // namespace ladder
