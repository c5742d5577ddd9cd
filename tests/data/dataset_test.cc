#include "src/data/dataset.h"

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/data/shards.h"

namespace ladder {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Iota(size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DatasetTest, EveryKthBlockValidates) {
  const std::vector<int32_t> tokens = Iota(20 * kSplitBlockTokens + 100);
  const TokenSplits s = SplitTrainVal(tokens, 0.1);
  // Blocks 9 and 19 validate; the partial block 20 trains.
  ASSERT_EQ(s.val.size(), 2 * kSplitBlockTokens);
  EXPECT_EQ(s.val[0], 9 * kSplitBlockTokens);
  EXPECT_EQ(s.val[kSplitBlockTokens], 19 * kSplitBlockTokens);
  EXPECT_EQ(s.train.size() + s.val.size(), tokens.size());
  EXPECT_EQ(s.train.back(), tokens.back());
}

TEST(DatasetTest, TinyInputsFeedBothSplits) {
  for (size_t n : {size_t{20}, size_t{100}, size_t{5000}}) {
    const TokenSplits s = SplitTrainVal(Iota(n), 0.1);
    EXPECT_FALSE(s.train.empty()) << n;
    EXPECT_FALSE(s.val.empty()) << n;
    EXPECT_EQ(s.train.size() + s.val.size(), n);
  }
  EXPECT_TRUE(SplitTrainVal(Iota(5), 0.1).val.empty());  // fewer tokens than 1/f
  const TokenSplits none = SplitTrainVal(Iota(100), 0.0);
  EXPECT_EQ(none.train.size(), 100u);
  EXPECT_TRUE(none.val.empty());
}

TEST(DatasetTest, LoadCorpusFromTextAndPreparedDirectory) {
  const std::string dir = ::testing::TempDir() + "/prepared";
  std::filesystem::create_directories(dir);
  const std::string text_path = dir + "/corpus.txt";
  std::ofstream(text_path, std::ios::binary) << std::string(1000, 'z');
  const Tokenizer tok = Tokenizer::ByteLevel();

  auto text = LoadCorpus(text_path, tok, 0.5);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->train.size() + text->val.size(), 1000u);
  EXPECT_FALSE(LoadCorpus(text_path, tok, 1.0).ok());

  ASSERT_TRUE(WriteShard(dir + "/" + kTrainShardName, {1, 2, 3}, 256).ok());
  ASSERT_TRUE(WriteShard(dir + "/" + kValShardName, {4, 5}, 256).ok());
  auto prepared = LoadCorpus(dir, tok, 0.1);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->train, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(prepared->val, (std::vector<int32_t>{4, 5}));

  ASSERT_TRUE(WriteShard(dir + "/" + kValShardName, {4, 300}, 512).ok());
  auto mismatch = LoadCorpus(dir, tok, 0.1);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("token id 300"));
}

}  // namespace
}  // namespace ladder
