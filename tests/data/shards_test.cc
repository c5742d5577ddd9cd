#include "src/data/shards.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(ShardsTest, RoundTripTwoAndFourBytesPerToken) {
  for (int vocab : {256, 65536, 70000}) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 10000; ++i) tokens.push_back((i * 7919) % vocab);
    tokens.push_back(vocab - 1);
    const std::string path = TempPath("round.bin");
    ASSERT_TRUE(WriteShard(path, tokens, vocab).ok());
    EXPECT_EQ(std::filesystem::file_size(path), 1024 + tokens.size() * (vocab <= 65536 ? 2 : 4));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    auto back = ReadShard(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, tokens);
  }
}

TEST(ShardsTest, EmptyShard) {
  const std::string path = TempPath("empty.bin");
  ASSERT_TRUE(WriteShard(path, {}, 300).ok());
  auto back = ReadShard(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->empty());
}

TEST(ShardsTest, TruncatedShardNamesFile) {
  const std::string path = TempPath("truncated.bin");
  ASSERT_TRUE(WriteShard(path, std::vector<int32_t>(100, 7), 256).ok());
  std::filesystem::resize_file(path, 1024 + 150);
  auto back = ReadShard(path);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.status().message(), HasSubstr(path));
  EXPECT_THAT(back.status().message(), HasSubstr("truncated"));

  std::filesystem::resize_file(path, 100);
  EXPECT_THAT(ReadShard(path).status().message(), HasSubstr("truncated"));
}

TEST(ShardsTest, RejectsBadHeaderAndTokens) {
  const std::string path = TempPath("bad.bin");
  std::ofstream(path, std::ios::binary) << std::string(1024, 'x');
  EXPECT_THAT(ReadShard(path).status().message(), HasSubstr("bad magic"));
  EXPECT_FALSE(WriteShard(path, {1, 256}, 256).ok());
  EXPECT_EQ(ReadShard(TempPath("missing.bin")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ladder
