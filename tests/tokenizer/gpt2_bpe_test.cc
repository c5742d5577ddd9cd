// GPT-2's tokenizer: vocab.json + merges.txt written here by the test, in
// GPT-2's own layout (the 256 byte symbols first, in code point order, so
// 'Ġ' is 220 as in GPT-2), a few merges and <|endoftext|>.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/serve/text_stream.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/byte_unicode.h"
#include "src/tokenizer/tokenizer_dir.h"

namespace ladder {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Entries = std::vector<std::pair<std::string, int>>;  // vocab.json, in file order

// Ids of single bytes in the test vocabulary (and GPT-2's): printable bytes
// from '!' = 0, the 68 others from 188.
constexpr int kA = 64, kB = 65, kC = 66, kE = 68, kH = 71, kI = 72, kT = 83, kSpace = 220;
constexpr int kCapH = 39;
// The merges' results and the special token.
constexpr int kSpaceT = 256, kHe = 257, kSpaceThe = 258, kBc = 259, kAb = 260, kAba = 261,
              kEndOfText = 262;

Entries ByteEntries() {
  std::vector<std::pair<char32_t, int>> order;
  for (int b = 0; b < 256; ++b) order.emplace_back(ByteToCodePoint(static_cast<uint8_t>(b)), b);
  std::sort(order.begin(), order.end());
  Entries e;
  for (const auto& [c, b] : order) {
    e.emplace_back(BytesToSymbols(std::string(1, static_cast<char>(b))),
                   static_cast<int>(e.size()));
  }
  return e;
}

Entries TestVocab() {
  Entries e = ByteEntries();
  for (const char* t : {"\xC4\xA0t", "he", "\xC4\xA0the", "bc", "ab", "aba", "<|endoftext|>"}) {
    e.emplace_back(t, static_cast<int>(e.size()));
  }
  return e;
}

// Rank order is not the order results were numbered in: "ab a" (rank 4)
// uses "ab", which only rank 5 makes.
const char kTestMerges[] = "#version: 0.2\n\xC4\xA0 t\nh e\n\xC4\xA0t he\nb c\nab a\na b\n";

std::string VocabJson(const Entries& entries) {
  std::string s = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    s += (i ? ", " : "") + nlohmann::json(entries[i].first).dump() + ": " +
         std::to_string(entries[i].second);
  }
  return s + "}";
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/gpt2_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

absl::StatusOr<Tokenizer> LoadFiles(const std::string& name, const std::string& vocab,
                                    const std::string& merges) {
  const std::string dir = TempDir(name);
  WriteText(dir + "/vocab.json", vocab);
  WriteText(dir + "/merges.txt", merges);
  return Tokenizer::LoadGpt2(dir + "/vocab.json", dir + "/merges.txt");
}

Tokenizer TestTokenizer() {
  auto tok = LoadFiles("test", VocabJson(TestVocab()), kTestMerges);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *std::move(tok);
}

std::vector<int32_t> Ids(std::initializer_list<int32_t> ids) { return ids; }

TEST(Gpt2BpeTest, LoadsTheTestFiles) {
  Tokenizer tok = TestTokenizer();
  EXPECT_EQ(tok.kind(), TokenizerKind::kGpt2);
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.end_of_text(), kEndOfText);
  EXPECT_EQ(tok.byte_id(' '), kSpace);
  EXPECT_EQ(tok.byte_id('a'), kA);
  EXPECT_EQ(tok.TokenBytes(kSpaceThe), " the");
  EXPECT_EQ(tok.TokenBytes(kEndOfText), "<|endoftext|>");
  ASSERT_EQ(tok.merges().size(), 6u);
  EXPECT_EQ(tok.merges()[2], std::make_pair(kSpaceT, kHe));
  EXPECT_EQ(tok.merge_result(2), kSpaceThe);
}

TEST(Gpt2BpeTest, EncodesByHand) {
  Tokenizer tok = TestTokenizer();
  EXPECT_EQ(tok.Encode(" the"), Ids({kSpaceThe}));
  EXPECT_EQ(tok.Encode("the the"), Ids({kT, kHe, kSpaceThe}));
  EXPECT_EQ(tok.Encode("Hi the"), Ids({kCapH, kI, kSpaceThe}));
  EXPECT_EQ(tok.Encode("t he"), Ids({kT, kSpace, kHe}));  // no merge "Ġ he"
  EXPECT_EQ(tok.Encode("ehec"), Ids({kE, kHe, kC}));
  EXPECT_EQ(tok.Encode(""), Ids({}));
}

TEST(Gpt2BpeTest, MergesByRankNotByPosition) {
  Tokenizer tok = TestTokenizer();
  // "b c" (rank 3) beats "a b" (rank 5), though "a b" comes first in the text.
  EXPECT_EQ(tok.Encode("abc"), Ids({kA, kBc}));
  // Every "a b" merges before the "ab a" it creates (rank 4) is looked at:
  // GPT-2's bpe() merges all occurrences of the best pair, then looks again.
  EXPECT_EQ(tok.Encode("abab"), Ids({kAb, kAb}));
  EXPECT_EQ(tok.Encode("aba"), Ids({kAba}));
}

TEST(Gpt2BpeTest, EndOfTextIsOneSpecialToken) {
  Tokenizer tok = TestTokenizer();
  EXPECT_EQ(tok.Encode("<|endoftext|>"), Ids({kEndOfText}));
  EXPECT_EQ(tok.Encode("a<|endoftext|> the<|endoftext|><|endoftext|>"),
            Ids({kA, kEndOfText, kSpaceThe, kEndOfText, kEndOfText}));
  // Not the whole literal: plain text ("<|", then "endoftext", no merges).
  EXPECT_EQ(tok.Encode("<|endoftext"), Ids({27, 91, 68, 77, 67, 78, 69, 83, 68, 87, 83}));
  auto text = tok.Decode({kA, kEndOfText, kSpaceThe});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "a<|endoftext|> the");
}

TEST(Gpt2BpeTest, DecodeRejectsIdsOutOfRange) {
  Tokenizer tok = TestTokenizer();
  EXPECT_EQ(tok.Decode({263}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok.Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

std::string RandomBytes(std::mt19937& rng, size_t max_len) {
  static const std::string kPieces[] = {
      "the", " the", "'s", "'S", "  ", "\n\n", "\t", "2024", "!!", "\xC3\xA9", "\xFF\xFE",
      std::string(1, '\0'), "\xE2\x82", "\xE4\xBD\xA0", "\xF0\x9F\x91\x8B", "\xC2\xA0",
      "<|endoftext|>", "<|", "ab", "c", " ", "'"};
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

void ExpectRoundTrip(const Tokenizer& tok, const std::string& text) {
  const std::vector<int32_t> ids = tok.Encode(text);
  auto back = tok.Decode(ids);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(*back, text);
}

TEST(Gpt2BpeTest, RoundTripsRandomBytes) {
  Tokenizer tok = TestTokenizer();
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) ExpectRoundTrip(tok, RandomBytes(rng, 80));
}

TEST(Gpt2BpeTest, RoundTripsUnicodeText) {
  Tokenizer tok = TestTokenizer();
  ExpectRoundTrip(tok,
                  "The na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96"
                  "\xE7\x95\x8C, \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, "
                  "\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD they'll say \xC2\xBD\n\n  e\xCC\x81\xE3\x80\x80!");
}

// A ladder tokenizer written as GPT-2's files loads back with the same
// tokens and merges; writing the loaded one gives the same files.
TEST(Gpt2BpeTest, SaveLoadRoundTrip) {
  std::string text;
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) text += RandomBytes(rng, 12) + " the abc ";
  auto ladder = Tokenizer::Train(text, 400);
  ASSERT_TRUE(ladder.ok()) << ladder.status();
  const std::string dir = TempDir("save");
  const absl::Status saved = ladder->SaveGpt2(dir + "/vocab.json", dir + "/merges.txt");
  if (!saved.ok()) {
    // Possible in principle: two merge paths to the same bytes.
    EXPECT_THAT(saved.message(), HasSubstr("are the same token"));
    GTEST_SKIP() << saved;
  }
  auto gpt2 = Tokenizer::LoadGpt2(dir + "/vocab.json", dir + "/merges.txt");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  ASSERT_EQ(gpt2->vocab_size(), ladder->vocab_size());
  for (int32_t id = 0; id < gpt2->vocab_size(); ++id) {
    ASSERT_EQ(gpt2->TokenBytes(id), ladder->TokenBytes(id)) << id;
  }
  EXPECT_EQ(gpt2->merges(), ladder->merges());
  EXPECT_EQ(gpt2->end_of_text(), -1);
  for (int trial = 0; trial < 300; ++trial) ExpectRoundTrip(*gpt2, RandomBytes(rng, 60));

  Tokenizer test = TestTokenizer();
  const std::string again = TempDir("again");
  ASSERT_TRUE(test.SaveGpt2(again + "/vocab.json", again + "/merges.txt").ok());
  auto reloaded = Tokenizer::LoadGpt2(again + "/vocab.json", again + "/merges.txt");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->end_of_text(), kEndOfText);
  EXPECT_EQ(reloaded->merges(), test.merges());
  EXPECT_EQ(reloaded->Encode("abab the<|endoftext|>"), test.Encode("abab the<|endoftext|>"));
  std::ifstream merges(again + "/merges.txt");
  std::string written((std::istreambuf_iterator<char>(merges)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, kTestMerges);
}

// Each bad file gives its own one-line error naming the file.
TEST(Gpt2BpeTest, RefusesBadFiles) {
  auto error = [](const std::string& name, const std::string& vocab, const std::string& merges) {
    auto tok = LoadFiles(name, vocab, merges);
    EXPECT_FALSE(tok.ok()) << name;
    EXPECT_EQ(tok.status().message().find('\n'), absl::string_view::npos) << tok.status();
    return std::string(tok.status().message());
  };
  const std::string good = VocabJson(TestVocab());
  EXPECT_THAT(error("json", "{\"a\": 1,", kTestMerges),
              AllOf(HasSubstr("vocab.json: not valid JSON"), HasSubstr("line 1")));
  EXPECT_THAT(error("array", "[1, 2]", kTestMerges), HasSubstr("expected a JSON object"));

  Entries e = TestVocab();
  e.emplace_back("\xE2\x82\xAC", 263);  // '€' is not a byte symbol
  EXPECT_THAT(error("alphabet", VocabJson(e), kTestMerges),
              AllOf(HasSubstr("vocab.json: token \"\xE2\x82\xAC\""),
                    HasSubstr("not spelled in GPT-2's byte alphabet")));
  e = TestVocab();
  e.back().second = kAba;
  EXPECT_THAT(error("shared", VocabJson(e), kTestMerges),
              AllOf(HasSubstr("\"<|endoftext|>\" and \"aba\" share id 261"),
                    HasSubstr("vocab.json")));
  e = TestVocab();
  e.back().second = 50256;
  EXPECT_THAT(error("range", VocabJson(e), kTestMerges),
              HasSubstr("token \"<|endoftext|>\": id 50256 out of range [0, 263)"));
  e = TestVocab();
  e.back().second = -1;
  EXPECT_THAT(error("negative", VocabJson(e), kTestMerges), HasSubstr("id -1 out of range"));
  e = TestVocab();
  e.back() = {"aba", 262};
  EXPECT_THAT(error("twice", VocabJson(e), kTestMerges), HasSubstr("token \"aba\" appears twice"));
  EXPECT_THAT(error("float", good.substr(0, good.find(": 0")) + ": 0.5" +
                                 good.substr(good.find(": 0") + 3),
                    kTestMerges),
              HasSubstr("token \"!\": id must be an integer, got 0.5"));
  // Drop 'Ċ' (the newline byte, id 188 + 10) and renumber the rest.
  e = TestVocab();
  e.erase(e.begin() + 198);
  for (size_t i = 0; i < e.size(); ++i) e[i].second = static_cast<int>(i);
  EXPECT_THAT(error("byte", VocabJson(e), kTestMerges),
              HasSubstr("vocab.json: no token for byte 0x0a (\"\xC4\x8A\")"));

  EXPECT_THAT(error("part", good, "#version: 0.2\nh e\nx yz\n"),
              HasSubstr("merges.txt:3: merge part \"yz\" is not in "));
  EXPECT_THAT(error("result", good, "h e\nt h\n"),
              HasSubstr("merges.txt:2: merge result \"th\" is not in "));
  EXPECT_THAT(error("shape", good, "h e\nabc\n"),
              HasSubstr("merges.txt:2: expected a merge 'A B' (two tokens, one space), got \"abc\""));
  EXPECT_THAT(error("spaces", good, "h  e\n"), HasSubstr("merges.txt:1: expected a merge"));
  EXPECT_THAT(error("dup", good, "h e\nb c\nh e\n"), HasSubstr("merges.txt:3: duplicate merge"));
  // A truncated merges.txt (or an empty one) leaves tokens no merge makes.
  EXPECT_THAT(error("truncated", good, "#version: 0.2\n\xC4\xA0 t\nh e\n"),
              AllOf(HasSubstr("merges.txt: no merge makes"),
                    HasSubstr("it has 2 merges for 6 tokens beyond the bytes (is it truncated?)")));
  EXPECT_THAT(error("empty", good, ""), HasSubstr("it has 0 merges for 6 tokens"));
}

TEST(Gpt2BpeTest, LadderFormatRefusesToSaveGpt2Kind) {
  Tokenizer tok = TestTokenizer();
  const std::string dir = TempDir("refuse");
  EXPECT_EQ(tok.Save(dir + "/tokenizer.bpe").code(), absl::StatusCode::kFailedPrecondition);
}

// The directory says which tokenizer it has.
TEST(TokenizerDirTest, FindsEitherKind) {
  const std::string dir = TempDir("dir");
  auto none = LoadTokenizerDir(dir);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(),
              AllOf(HasSubstr("tokenizer.bpe"), HasSubstr("vocab.json + merges.txt")));

  ASSERT_TRUE(SaveTokenizerDir(TestTokenizer(), dir).ok());
  auto gpt2 = LoadTokenizerDir(dir);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(gpt2->kind(), TokenizerKind::kGpt2);
  EXPECT_EQ(gpt2->end_of_text(), kEndOfText);

  // Saving the other kind replaces it.
  ASSERT_TRUE(SaveTokenizerDir(Tokenizer::ByteLevel(), dir).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/vocab.json"));
  auto ladder = LoadTokenizerDir(dir);
  ASSERT_TRUE(ladder.ok()) << ladder.status();
  EXPECT_EQ(ladder->kind(), TokenizerKind::kLadder);
  EXPECT_EQ(ladder->end_of_text(), -1);

  WriteText(dir + "/vocab.json", VocabJson(TestVocab()));
  EXPECT_THAT(LoadTokenizerDir(dir).status().message(), HasSubstr("holds two tokenizers"));
  std::filesystem::remove(dir + "/tokenizer.bpe");
  EXPECT_THAT(LoadTokenizerDir(dir).status().message(),
              HasSubstr("has vocab.json but no merges.txt"));
}

// Generation ends at <|endoftext|>: the stream flushes and stops there.
TEST(Gpt2BpeTest, TextStreamStopsAtEndOfText) {
  Tokenizer tok = TestTokenizer();
  TextStream s(&tok, {"zz"});
  std::string out = s.Push(kSpaceThe);
  out += s.Push(tok.byte_id('z'));  // held: could start the stop string
  EXPECT_EQ(out, " the");
  EXPECT_EQ(s.Push(kEndOfText), "z");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Push(kA), "");
  EXPECT_EQ(s.Finish(), "");

  Tokenizer ladder = Tokenizer::ByteLevel();  // no end-of-text: every id is text
  TextStream t(&ladder, {});
  EXPECT_EQ(t.Push('a'), "a");
  EXPECT_FALSE(t.stopped());
}

}  // namespace
}  // namespace ladder
