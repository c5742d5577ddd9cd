// The KV-cached forward equals full recomputation: three sequences prefilled
// in chunks and then decoded a token at a time give, at every position, the
// logits Gpt::Forward computes over the whole prefix (within 1e-4); and a
// model trained on a pattern decodes greedily to the same tokens both ways.
#include <algorithm>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/serve/kv_blocks.h"
#include "src/train/trainer.h"
#include "tests/model/small_gpt.h"

namespace ladder {
namespace {

GptConfig Small() { return SmallGpt(64); }

// Block tables of the pool's sequences as CachedTokens wants them.
void FillTables(const KvBlockPool& pool, const std::vector<KvBlockPool::SequenceId>& ids,
                int max_blocks, CachedTokens* batch) {
  batch->max_blocks = max_blocks;
  batch->block_tables = pool.BlockTables(ids, max_blocks);
}

TEST(CachedForwardTest, ChunkedPrefillAndDecodeEqualFullRecomputation) {
  const GptConfig cfg = Small();
  const int B = 3, T = 40;
  CpuBackend be;
  auto model = *Gpt::Create(cfg, &be, B, /*training=*/false);
  ASSERT_TRUE(model->InitWeights(5).ok());
  std::vector<int32_t> tokens(B * T);
  PhiloxStream rng(9, 0);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.NextU32() % cfg.vocab_size);
  ASSERT_TRUE(model->Forward(tokens.data(), nullptr, B, T).ok());
  std::vector<std::vector<float>> want(B * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) ASSERT_TRUE(model->LogitsAt(b, t, &want[b * T + t]).ok());
  }

  KvBlockPool pool(16);
  auto cache = *KvCache::Create(cfg, &be, 16);
  std::vector<KvBlockPool::SequenceId> ids;
  for (int b = 0; b < B; ++b) {
    ids.push_back(*pool.AddSequence(
        std::vector<int32_t>(tokens.begin() + b * T, tokens.begin() + b * T + T)));
  }
  // Steps: a 17-token prefill chunk per sequence, one of 5, then single tokens.
  int done = 0;
  while (done < T) {
    const int n = done == 0 ? 17 : done == 17 ? 5 : 1;
    CachedTokens batch;
    for (int b = 0; b < B; ++b) {
      for (int t = done; t < done + n; ++t) {
        batch.tokens.push_back(tokens[b * T + t]);
        batch.seq.push_back(b);
        batch.pos.push_back(t);
      }
    }
    FillTables(pool, ids, 4, &batch);
    std::vector<float> logits;
    ASSERT_TRUE(model->ForwardCached(batch, cache, &logits).ok());
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
      const std::vector<float>& w = want[batch.seq[i] * T + batch.pos[i]];
      for (int v = 0; v < cfg.vocab_size; ++v) {
        ASSERT_NEAR(logits[i * cfg.vocab_size + v], w[v], 1e-4f)
            << "sequence " << batch.seq[i] << " position " << batch.pos[i];
      }
    }
    done += n;
  }
  // Out-of-range input is refused.
  CachedTokens bad;
  bad.tokens = {1};
  bad.seq = {0};
  bad.pos = {cfg.context};
  FillTables(pool, ids, 4, &bad);
  std::vector<float> logits;
  EXPECT_EQ(model->ForwardCached(bad, cache, &logits).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CachedForwardTest, GreedyDecodingMatchesFullRecomputationOnATrainedModel) {
  // A model that has learned a pattern, so the next token is never a near tie.
  std::vector<int32_t> data(4000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = "In the beginning God"[i % 20];
  RunConfig rc;
  rc.model = Small();
  rc.model.context = 32;
  rc.batch_size = 4;
  rc.steps = 80;
  rc.lr = 1e-2;
  rc.warmup_steps = 5;
  CpuBackend be;
  auto trainer = *Trainer::Create(rc, &be, &data, &data, 0);
  for (int i = 0; i < rc.steps; ++i) ASSERT_TRUE(trainer->Step().ok());
  std::vector<float> weights(trainer->model().table().total_floats());
  ASSERT_TRUE(trainer->model().GetWeights(weights.data()).ok());
  auto model = *Gpt::Create(rc.model, &be, 1, /*training=*/false);
  ASSERT_TRUE(model->SetWeights(weights.data()).ok());

  const std::vector<int32_t> prompt = {'I', 'n', ' ', 't'};
  const int steps = 24;
  auto argmax = [](const float* p, int n) {
    return static_cast<int32_t>(std::max_element(p, p + n) - p);
  };
  // Full recomputation: the whole prefix every step.
  std::vector<int32_t> full = prompt;
  std::vector<float> row;
  for (int i = 0; i < steps; ++i) {
    const int T = static_cast<int>(full.size());
    ASSERT_TRUE(model->Forward(full.data(), nullptr, 1, T).ok());
    ASSERT_TRUE(model->LogitsAt(0, T - 1, &row).ok());
    full.push_back(argmax(row.data(), rc.model.vocab_size));
  }
  // Cached: the prompt once, then one token per step.
  KvBlockPool pool(4);
  auto cache = *KvCache::Create(rc.model, &be, 4);
  auto id = *pool.AddSequence(prompt);
  std::vector<int32_t> cached = prompt;
  CachedTokens batch;
  batch.tokens = prompt;
  batch.seq.assign(prompt.size(), 0);
  batch.pos.resize(prompt.size());
  std::iota(batch.pos.begin(), batch.pos.end(), 0);
  for (int i = 0; i < steps; ++i) {
    FillTables(pool, {id}, 2, &batch);
    std::vector<float> logits;
    ASSERT_TRUE(model->ForwardCached(batch, cache, &logits).ok());
    const int32_t next = argmax(logits.data() + (batch.tokens.size() - 1) * rc.model.vocab_size,
                                rc.model.vocab_size);
    cached.push_back(next);
    ASSERT_TRUE(pool.Append(id, {next}).ok());
    batch.tokens = {next};
    batch.seq = {0};
    batch.pos = {static_cast<int32_t>(cached.size()) - 1};
  }
  EXPECT_EQ(cached, full);
  EXPECT_NE(std::string(full.begin(), full.end()).find("beginning"), std::string::npos)
      << "the model should have learned its text";
}

}  // namespace
}  // namespace ladder
