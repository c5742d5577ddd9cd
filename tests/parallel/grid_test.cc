#include "src/parallel/grid.h"

#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

using ::testing::ElementsAre;

Grid MakeGrid(GridShape shape, int rank) {
  auto g = Grid::Create(shape, shape.dp * shape.cp * shape.tp * shape.pp, rank);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(GridTest, RefusesBadShapesWithOneLine) {
  auto g = Grid::Create({.dp = 2, .tp = 2, .pp = 2}, 4, 0);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), "dp*tp*pp = 8 but the world has 4 ranks");
  g = Grid::Create({.dp = 0, .tp = 2, .pp = 1}, 0, 0);
  EXPECT_EQ(g.status().message(), "dp must be at least 1, got 0");
  g = Grid::Create({.dp = 1, .tp = 1, .pp = -1}, 1, 0);
  EXPECT_EQ(g.status().message(), "pp must be at least 1, got -1");
  g = Grid::Create({.dp = 2, .tp = 1, .pp = 1}, 2, 2);
  EXPECT_EQ(g.status().message(), "rank 2 is outside a world of 2 ranks");
}

TEST(GridTest, ContextParallelIsNextToTensorParallel) {
  // [pp][dp][cp][tp] = [2][2][2][2]: rank 13 = (pp 1, dp 1, cp 0, tp 1).
  Grid g = MakeGrid({.dp = 2, .tp = 2, .pp = 2, .cp = 2}, 13);
  EXPECT_EQ(g.pp_rank(), 1);
  EXPECT_EQ(g.dp_rank(), 1);
  EXPECT_EQ(g.cp_rank(), 0);
  EXPECT_EQ(g.tp_rank(), 1);
  EXPECT_EQ(g.RankOf(1, 1, 1, 0), 13);
  EXPECT_THAT(g.Members(Axis::kTensor), ElementsAre(12, 13));
  EXPECT_THAT(g.Members(Axis::kContext), ElementsAre(13, 15));
  // The data axis is every rank holding the same weights: dp x cp of them.
  EXPECT_THAT(g.Members(Axis::kData), ElementsAre(9, 11, 13, 15));
  EXPECT_EQ(g.GroupRank(Axis::kData), 2);
  EXPECT_THAT(g.Members(Axis::kPipeline), ElementsAre(5, 13));
  EXPECT_EQ(Grid::Create({.dp = 2, .tp = 2, .pp = 1, .cp = 2}, 4, 0).status().message(),
            "dp*cp*tp*pp = 8 but the world has 4 ranks");
}

TEST(GridTest, TensorParallelIsInnermost) {
  // [pp][dp][tp] = [2][2][2]: rank 5 = (pp 1, dp 0, tp 1).
  Grid g = MakeGrid({.dp = 2, .tp = 2, .pp = 2}, 5);
  EXPECT_EQ(g.pp_rank(), 1);
  EXPECT_EQ(g.dp_rank(), 0);
  EXPECT_EQ(g.tp_rank(), 1);
  EXPECT_EQ(g.RankOf(1, 0, 1), 5);
  EXPECT_EQ(g.RankOf(0, 1, 0), 2);
  EXPECT_THAT(g.Members(Axis::kTensor), ElementsAre(4, 5));
  EXPECT_THAT(g.Members(Axis::kData), ElementsAre(5, 7));
  EXPECT_THAT(g.Members(Axis::kPipeline), ElementsAre(1, 5));
  EXPECT_THAT(g.Members(Axis::kEmbedding), ElementsAre(1, 5));
  EXPECT_THAT(g.Members(Axis::kWorld), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(g.GroupRank(Axis::kEmbedding), 1);
  EXPECT_FALSE(g.is_first_stage());
  EXPECT_TRUE(g.is_last_stage());
}

// For every shape and axis: each rank's coordinates round-trip through
// RankOf, every member of a group computes the same list with itself at
// GroupRank, and (world aside) the groups of an axis partition the world.
TEST(GridTest, GroupsAreConsistentAndPartitionTheWorld) {
  const GridShape shapes[] = {{1, 1, 1},    {2, 1, 1},    {1, 2, 1},   {1, 1, 2}, {2, 2, 2},
                              {3, 2, 4},    {4, 1, 3},    {1, 4, 2},   {2, 3, 1}, {1, 1, 1, 2},
                              {2, 2, 2, 2}, {1, 2, 3, 4}, {3, 1, 2, 2}};
  for (const GridShape& s : shapes) {
    const int world = s.dp * s.cp * s.tp * s.pp;
    for (Axis axis : {Axis::kWorld, Axis::kData, Axis::kTensor, Axis::kPipeline, Axis::kContext}) {
      std::set<int> seen;
      int groups = 0;
      for (int r = 0; r < world; ++r) {
        Grid g = MakeGrid(s, r);
        ASSERT_EQ(g.RankOf(g.pp_rank(), g.dp_rank(), g.tp_rank(), g.cp_rank()), r);
        std::vector<int> m = g.Members(axis);
        ASSERT_EQ(m[g.GroupRank(axis)], r) << AxisName(axis);
        for (int member : m) {
          EXPECT_EQ(MakeGrid(s, member).Members(axis), m) << AxisName(axis) << " rank " << r;
        }
        if (g.GroupRank(axis) == 0) {
          ++groups;
          for (int member : m) EXPECT_TRUE(seen.insert(member).second);
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), world) << AxisName(axis);
      const int expected_size = axis == Axis::kWorld     ? world
                                : axis == Axis::kData    ? s.dp * s.cp
                                : axis == Axis::kTensor  ? s.tp
                                : axis == Axis::kContext ? s.cp
                                                         : s.pp;
      EXPECT_EQ(groups * expected_size, world) << AxisName(axis);
    }
  }
}

TEST(GridTest, TensorGroupsAreAdjacentRanks) {
  for (int r = 0; r < 24; ++r) {
    Grid g = MakeGrid({.dp = 3, .tp = 4, .pp = 2}, r);
    EXPECT_THAT(g.Members(Axis::kTensor),
                ElementsAre(r / 4 * 4, r / 4 * 4 + 1, r / 4 * 4 + 2, r / 4 * 4 + 3));
  }
}

TEST(GridTest, EmbeddingGroupJoinsFirstAndLastStage) {
  // pp = 3, dp = 2, tp = 1: stages are ranks {0,1}, {2,3}, {4,5}.
  GridShape s{.dp = 2, .tp = 1, .pp = 3};
  EXPECT_THAT(MakeGrid(s, 1).Members(Axis::kEmbedding), ElementsAre(1, 5));
  EXPECT_EQ(MakeGrid(s, 1).GroupRank(Axis::kEmbedding), 0);
  EXPECT_THAT(MakeGrid(s, 5).Members(Axis::kEmbedding), ElementsAre(1, 5));
  EXPECT_EQ(MakeGrid(s, 5).GroupRank(Axis::kEmbedding), 1);
  // A middle stage holds no embedding: alone in its group.
  EXPECT_THAT(MakeGrid(s, 2).Members(Axis::kEmbedding), ElementsAre(2));
  EXPECT_EQ(MakeGrid(s, 2).GroupRank(Axis::kEmbedding), 0);
  // One stage is both ends.
  Grid single = MakeGrid({.dp = 2, .tp = 2, .pp = 1}, 3);
  EXPECT_THAT(single.Members(Axis::kEmbedding), ElementsAre(3));
  EXPECT_TRUE(single.is_first_stage() && single.is_last_stage());
}

TEST(GridTest, AxisNames) {
  EXPECT_STREQ(AxisName(Axis::kWorld), "world");
  EXPECT_STREQ(AxisName(Axis::kData), "data");
  EXPECT_STREQ(AxisName(Axis::kTensor), "tensor");
  EXPECT_STREQ(AxisName(Axis::kPipeline), "pipeline");
  EXPECT_STREQ(AxisName(Axis::kEmbedding), "embedding");
}

}  // namespace
}  // namespace ladder
