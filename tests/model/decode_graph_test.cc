// Decode steps as CUDA graphs (Gpt::UseGraphs on an inference model), on the
// simulator: two copies of one model, one eager and one with graphs, each
// with its own cache, run the same schedule (a prefill chunk, decode steps
// of three sequences whose block tables widen as they grow, then of two,
// some drawing their tokens on the device) and give bitwise the same logits
// and tokens at every step, with fp32 and int8 weights and caches, and with
// int8 and bf16 activations (W8A16); the graphed model recorded few graphs
// and replayed most steps.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/backend_factory.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/serve/kv_blocks.h"
#include "tests/model/small_gpt.h"

namespace ladder {
namespace {

GptConfig Small() { return SmallGpt(128); }

struct Copy {
  std::unique_ptr<Gpt> model;
  std::unique_ptr<KvCache> cache;
};

Copy Make(Backend* be, WeightFormat weights, KvFormat kv, bool bf16, bool graphs) {
  const GptConfig cfg = Small();
  Copy c;
  c.model = *Gpt::Create(cfg, be, 1, /*training=*/false);
  EXPECT_TRUE(c.model->InitWeights(7).ok());
  EXPECT_TRUE(c.model->QuantizeWeights(weights).ok());
  if (bf16) {
    EXPECT_TRUE(c.model->UseBf16Activations().ok());
  }
  if (graphs) {
    EXPECT_TRUE(c.model->UseGraphs(true).ok());
  }
  c.cache = std::make_unique<KvCache>(*KvCache::Create(cfg, be, 32, kv));
  return c;
}

// fp32; int8 weights and cache; the same with bf16 activations.
enum class Formats { kFp32, kInt8, kInt8Bf16 };
class DecodeGraphTest : public ::testing::TestWithParam<Formats> {};

TEST_P(DecodeGraphTest, GraphedDecodeStepsEqualEagerOnesBitwise) {
  const bool int8 = GetParam() != Formats::kFp32, bf16 = GetParam() == Formats::kInt8Bf16;
  auto backend = *MakeBackend("cuda-sim");
  const WeightFormat weights = int8 ? WeightFormat::kInt8 : WeightFormat::kF32;
  const KvFormat kv = int8 ? KvFormat::kInt8 : KvFormat::kF32;
  Copy eager = Make(backend.get(), weights, kv, bf16, false);
  Copy graphed = Make(backend.get(), weights, kv, bf16, true);

  KvBlockPool pool(32);
  std::vector<KvBlockPool::SequenceId> ids;
  std::vector<std::vector<int32_t>> seqs(3);
  PhiloxStream rng(3, 0);
  for (auto& s : seqs) {
    for (int t = 0; t < 40; ++t) s.push_back(static_cast<int32_t>(rng.NextU32() % 256));
    ids.push_back(*pool.AddSequence(s));
  }
  // step(from, n, live): n tokens from position `from` of the first `live`
  // sequences; both models must give the same bits.
  int steps = 0;
  auto step = [&](int from, int n, int live, bool sample) {
    CachedTokens batch;
    for (int b = 0; b < live; ++b) {
      for (int t = from; t < from + n; ++t) {
        batch.tokens.push_back(seqs[b][t]);
        batch.seq.push_back(b);
        batch.pos.push_back(t);
      }
    }
    batch.max_blocks = (from + n + KvCache::kBlockTokens - 1) / KvCache::kBlockTokens;
    batch.block_tables = pool.BlockTables(
        std::vector<KvBlockPool::SequenceId>(ids.begin(), ids.begin() + live), batch.max_blocks);
    ++steps;
    if (sample) {
      std::vector<TokenSampleSpec> specs(batch.tokens.size());
      for (size_t i = 0; i < specs.size(); ++i) specs[i].row = static_cast<int>(i);
      std::vector<int32_t> a, b;
      ASSERT_TRUE(eager.model->ForwardSample(batch, *eager.cache, specs, &a).ok());
      ASSERT_TRUE(graphed.model->ForwardSample(batch, *graphed.cache, specs, &b).ok());
      EXPECT_EQ(a, b) << "step " << steps;
      return;
    }
    std::vector<float> a, b;
    ASSERT_TRUE(eager.model->ForwardCached(batch, *eager.cache, &a).ok());
    ASSERT_TRUE(graphed.model->ForwardCached(batch, *graphed.cache, &b).ok());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i], b[i]) << "step " << steps << " element " << i;
    }
  };
  step(0, 5, 3, false);  // a prefill chunk: eager in both
  // Decode: 3 sequences from position 5 to 35 (block tables 1 to 3 wide),
  // then 2 sequences; every third step draws on the device.
  for (int p = 5; p < 36; ++p) step(p, 1, 3, p % 3 == 0);
  for (int p = 36; p < 40; ++p) step(p, 1, 2, false);

  const Gpt::GraphCounts counts = graphed.model->graph_counts();
  // Keys: 3 sequences at table widths 1, 2 and 4, then 2 sequences at 4.
  EXPECT_EQ(counts.captures, 4);
  EXPECT_EQ(counts.replays, 35 - 4);  // every decode step but each key's eager first
  EXPECT_EQ(eager.model->graph_counts().replays, 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, DecodeGraphTest,
                         ::testing::Values(Formats::kFp32, Formats::kInt8, Formats::kInt8Bf16),
                         [](const auto& info) {
                           return info.param == Formats::kFp32   ? "fp32"
                                  : info.param == Formats::kInt8 ? "int8"
                                                                 : "int8_bf16";
                         });

TEST(DecodeGraphRefusalTest, CpuBackendHasNoGraphs) {
  auto backend = *MakeBackend("cpu");
  auto model = *Gpt::Create(Small(), backend.get(), 1, /*training=*/false);
  const absl::Status s = model->UseGraphs(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "cannot record graphs: the cpu backend has none (cuda and cuda-sim do)");
}

}  // namespace
}  // namespace ladder
