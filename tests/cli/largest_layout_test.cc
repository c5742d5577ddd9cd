// LargestLayout, the elastic supervisor's choice of layout for the ranks
// that are left: data-parallel replicas go first, tp and pp stay while they
// fit, the global batch never changes, and a world nothing fits is refused.
#include "gtest/gtest.h"
#include "src/cli/parallel_layout.h"

namespace ladder {
namespace {

// tests/parallel/equivalence.conf's model: 4 layers, 4 heads, 8 sequences a step.
RunConfig Config() {
  RunConfig rc;
  rc.model.n_layer = 4;
  rc.model.n_head = 4;
  rc.model.n_embd = 32;
  rc.model.context = 32;
  rc.model.vocab_size = 256;
  rc.batch_size = 8;
  return rc;
}

LayoutFlags Want(int64_t dp, int64_t tp, int64_t pp, int64_t microbatches) {
  LayoutFlags f;
  f.dp = dp;
  f.tp = tp;
  f.pp = pp;
  f.microbatches = microbatches;
  return f;
}

void ExpectLayout(const absl::StatusOr<LayoutFlags>& got, int64_t dp, int64_t tp, int64_t pp,
                  int64_t microbatches) {
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->dp, dp);
  EXPECT_EQ(got->tp, tp);
  EXPECT_EQ(got->pp, pp);
  EXPECT_EQ(got->microbatches, microbatches);
}

TEST(LargestLayoutTest, AllRanksKeepTheWantedLayout) {
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 8), 2, 2, 2, 2);
  // More ranks than wanted: never beyond the job's own layout.
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 16), 2, 2, 2, 2);
}

TEST(LargestLayoutTest, DropsDataParallelReplicasFirstKeepingTheMicrobatchSize) {
  // dp2 x 2 microbatches of 2 sequences; dp1 takes all 8 in 4 microbatches of 2.
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 4), 1, 2, 2, 4);
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 7), 1, 2, 2, 4);
  // dp4 of 1 microbatch (2 sequences): dp2 takes 4 sequences in 2.
  ExpectLayout(LargestLayout(Config(), Want(4, 1, 1, 0), 3), 2, 1, 1, 2);
}

TEST(LargestLayoutTest, KeepsTheMicrobatchCountWhenTheSizeDoesNotDivide) {
  // 8 sequences, dp 4 x 2 microbatches of 1: dp3 would split 8 unevenly, so
  // dp2 (4 sequences each) keeps microbatches of 1: 4 of them.
  ExpectLayout(LargestLayout(Config(), Want(4, 1, 1, 2), 3), 2, 1, 1, 4);
  RunConfig rc = Config();
  rc.batch_size = 6;
  // 6 sequences: dp 3 x 1 microbatch of 2; dp2 has 3 sequences per rank,
  // not a multiple of 2, so it keeps 1 microbatch (of 3).
  ExpectLayout(LargestLayout(rc, Want(3, 1, 1, 1), 2), 2, 1, 1, 1);
}

TEST(LargestLayoutTest, ShrinksThePipelineBeforeTensorGroupsWhenTheyNoLongerFit) {
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 3), 1, 2, 1, 4);
  ExpectLayout(LargestLayout(Config(), Want(1, 4, 1, 1), 3), 1, 2, 1, 1);
  ExpectLayout(LargestLayout(Config(), Want(2, 2, 2, 2), 1), 1, 1, 1, 4);
}

TEST(LargestLayoutTest, NothingFitsIsAClearError) {
  const absl::StatusOr<LayoutFlags> none = LargestLayout(Config(), Want(2, 2, 2, 2), 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "no layout of dp x tp x pp at most dp 2 x tp 2 x pp 2 fits 0 rank(s) and the config");
}

}  // namespace
}  // namespace ladder
