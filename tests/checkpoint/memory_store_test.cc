// One node's memory checkpoint area (src/checkpoint/memory_checkpoint.h):
// a committed step reads back byte for byte, an uncommitted one is never
// seen and is cleared by the next save, only the newest steps are kept, a
// flipped byte in a stored shard fails its checksum, and the node rule
// follows its variables.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "src/checkpoint/memory_checkpoint.h"
#include "src/core/crc32.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;

class MemoryStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ladder-memory-store-test-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// A shard file of 16 floats in one piece, and the manifest entry for it.
std::string Shard(float first, Manifest* m) {
  std::string bytes(kShardMagic, kShardMagic + 8);
  bytes.append(8, '\0');
  for (int i = 0; i < 16; ++i) {
    const float x = first + static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&x), 4);
  }
  ShardFile f;
  f.name = ShardFileName(0);
  f.bytes = static_cast<int64_t>(bytes.size());
  m->files = {f};
  Piece p;
  p.offset = kShardHeaderBytes;
  p.rows = {{0, 4}};
  p.cols = 4;
  p.crc = Crc32(0, bytes.data() + p.offset, 64);
  m->pieces = {p};
  return bytes;
}

TEST_F(MemoryStoreTest, CommittedStepsReadBackAndOnlyTheNewestAreKept) {
  MemoryStore store((root_ / "node-0").string());
  EXPECT_EQ(store.Latest().status().code(), absl::StatusCode::kNotFound);
  for (int64_t step : {2, 4, 6}) {
    ASSERT_TRUE(store.Begin(step).ok());
    ASSERT_TRUE(store.Put(step, "rank-00000.bin", "shard " + std::to_string(step)).ok());
    ASSERT_TRUE(store.Commit(step, "manifest " + std::to_string(step), 2).ok());
    ASSERT_TRUE(store.Latest().ok());
    EXPECT_EQ(*store.Latest(), step);
  }
  EXPECT_EQ(*store.Get(6, "rank-00000.bin"), "shard 6");
  EXPECT_EQ(*store.Get(6, "manifest"), "manifest 6");
  EXPECT_EQ(*store.Get(4, "rank-00000.bin"), "shard 4");
  EXPECT_FALSE(store.Get(2, "rank-00000.bin").ok());  // beyond the newest two
  EXPECT_FALSE(fs::exists(root_ / "node-0" / "step-00000002"));
}

TEST_F(MemoryStoreTest, AnUncommittedStepIsIgnoredThenCleared) {
  MemoryStore store((root_ / "node-0").string());
  ASSERT_TRUE(store.Begin(2).ok());
  ASSERT_TRUE(store.Put(2, "rank-00000.bin", "two").ok());
  ASSERT_TRUE(store.Commit(2, "m", 2).ok());
  // A writer dies between its shard and the commit: step 4 stays torn.
  ASSERT_TRUE(store.Begin(4).ok());
  ASSERT_TRUE(store.Put(4, "rank-00000.bin", "half").ok());
  EXPECT_EQ(*store.Latest(), 2);
  EXPECT_EQ(store.Get(4, "rank-00000.bin").status().code(), absl::StatusCode::kNotFound);
  // The next save clears it.
  ASSERT_TRUE(store.Begin(6).ok());
  EXPECT_FALSE(fs::exists(root_ / "node-0" / "step-00000004.tmp"));
  EXPECT_TRUE(fs::exists(root_ / "node-0" / "step-00000006.tmp"));
  EXPECT_EQ(*store.Latest(), 2);
}

TEST_F(MemoryStoreTest, AFlippedByteFailsItsChecksum) {
  MemoryStore store((root_ / "node-0").string());
  Manifest m;
  const std::string shard = Shard(1.0f, &m);
  ASSERT_TRUE(store.Begin(2).ok());
  ASSERT_TRUE(store.Put(2, ShardFileName(0), shard).ok());
  ASSERT_TRUE(store.Commit(2, "m", 2).ok());
  absl::StatusOr<std::string> back = store.Get(2, ShardFileName(0));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(CheckShardPieces(*back, m, 0, "copy").ok());
  std::string flipped = *back;
  flipped[40] ^= 1;
  EXPECT_EQ(CheckShardPieces(flipped, m, 0, "copy").message(),
            "shard 'copy': checksum mismatch in tensor 0 (w)");
  EXPECT_EQ(CheckShardPieces(back->substr(0, 50), m, 0, "copy").message(),
            "shard 'copy' has 50 bytes, the manifest says 80");
}

TEST(NodeMapTest, FollowsTheVariables) {
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  ::unsetenv("LADDER_RANKS_PER_NODE");
  EXPECT_EQ(NodeMapFromEnv(4)->nodes(), 4);  // a node per rank
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  ::setenv("LADDER_RANKS_PER_NODE", "2", 1);  // wins over the launcher's
  absl::StatusOr<NodeMap> m = NodeMapFromEnv(4);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->nodes(), 2);
  EXPECT_EQ(m->node(3), 1);
  EXPECT_EQ(m->successor(1), 3);
  EXPECT_EQ(m->successor(3), 1);
  EXPECT_EQ(m->predecessor(0), 2);
  ::setenv("LADDER_RANKS_PER_NODE", "3", 1);
  EXPECT_EQ(NodeMapFromEnv(4).status().message(),
            "LADDER_RANKS_PER_NODE=3 must divide the world's 4 ranks");
  ::setenv("LADDER_RANKS_PER_NODE", "two", 1);
  EXPECT_EQ(NodeMapFromEnv(4).status().message(),
            "LADDER_RANKS_PER_NODE must be a positive integer, got 'two'");
  ::unsetenv("LADDER_RANKS_PER_NODE");
  EXPECT_EQ(NodeMapFromEnv(8)->ranks_per_node, 4);  // the launcher's count
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST(MemoryAreaTest, OneAreaPerCheckpointDirectory) {
  ::setenv("LADDER_MEM_CHECKPOINT_ROOT", "/tmp/areas", 1);
  const std::string a = MemoryCheckpointArea("runs/x/checkpoints");
  EXPECT_EQ(a.rfind("/tmp/areas/ladder-", 0), 0u);
  EXPECT_EQ(a, MemoryCheckpointArea("runs/x/./checkpoints"));
  EXPECT_NE(a, MemoryCheckpointArea("runs/y/checkpoints"));
  ::unsetenv("LADDER_MEM_CHECKPOINT_ROOT");
}

}  // namespace
}  // namespace ladder
