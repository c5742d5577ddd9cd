// Continuous batching does not change what a request generates: 32 requests
// (greedy and seeded sampling, prompts of different lengths) run together
// under a small token budget and a cache too small for all of them at once
// give exactly the tokens each gives alone; every block comes back; requests
// that can never fit are refused with a reason; cancelling frees blocks.
#include "src/serve/engine.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A model that has learned some text, so its distributions are peaked
    // like a real model's.
    std::vector<int32_t> data(4000);
    const char kText[] = "In the beginning God created the heaven and the earth. ";
    for (size_t i = 0; i < data.size(); ++i) data[i] = kText[i % (sizeof(kText) - 1)];
    RunConfig rc;
    rc.model.n_layer = 2;
    rc.model.n_head = 2;
    rc.model.n_embd = 32;
    rc.model.context = 64;
    rc.model.vocab_size = 256;
    rc.batch_size = 4;
    rc.steps = 60;
    rc.lr = 1e-2;
    rc.warmup_steps = 5;
    auto trainer = *Trainer::Create(rc, &be_, &data, &data, 0);
    for (int i = 0; i < rc.steps; ++i) ASSERT_TRUE(trainer->Step().ok());
    std::vector<float> w(trainer->model().table().total_floats());
    ASSERT_TRUE(trainer->model().GetWeights(w.data()).ok());
    model_ = *Gpt::Create(rc.model, &be_, 1, /*training=*/false);
    ASSERT_TRUE(model_->SetWeights(w.data()).ok());
  }

  std::vector<EngineRequest> Requests() const {
    std::vector<EngineRequest> out;
    const std::string text = "In the beginning God created the heaven and the earth.";
    for (int i = 0; i < 32; ++i) {
      EngineRequest r;
      const size_t len = 1 + (i * 7) % 40;
      r.prompt.assign(text.begin() + i % 10,
                      text.begin() + i % 10 + std::min(len, text.size() - 10));
      r.max_tokens = 4 + i % 13;
      r.seed = 100 + i;
      if (i % 2 == 1)
        r.sampling = {0.8, 20, 0.95};
      else
        r.sampling.temperature = 0;  // greedy
      out.push_back(r);
    }
    return out;
  }

  // Runs the requests to completion; the tokens of each, by submit order.
  std::vector<std::vector<int32_t>> Run(const EngineConfig& cfg,
                                        const std::vector<EngineRequest>& reqs) {
    auto engine = *Engine::Create(model_.get(), cfg);
    std::map<int64_t, size_t> index;
    for (size_t i = 0; i < reqs.size(); ++i) index[*engine->Submit(reqs[i])] = i;
    std::vector<std::vector<int32_t>> out(reqs.size());
    std::vector<bool> finished(reqs.size(), false);
    int steps = 0;
    while (!engine->idle()) {
      auto events = engine->Step();
      EXPECT_TRUE(events.ok()) << events.status();
      if (!events.ok()) break;
      for (const EngineEvent& e : *events) {
        out[index[e.request]].push_back(e.token);
        if (e.finished) finished[index[e.request]] = true;
      }
      EXPECT_LE(engine->blocks().used_blocks(), cfg.kv_blocks);
      if (++steps > 10000) break;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_TRUE(finished[i]) << i;
      EXPECT_EQ(out[i].size(), static_cast<size_t>(reqs[i].max_tokens)) << i;
    }
    EXPECT_EQ(engine->blocks().used_blocks(), 0);
    return out;
  }

  CpuBackend be_;
  std::unique_ptr<Gpt> model_;
};

TEST_F(EngineTest, BatchedOutputsEqualSoloOutputs) {
  const std::vector<EngineRequest> reqs = Requests();
  std::vector<std::vector<int32_t>> solo;
  for (const EngineRequest& r : reqs) solo.push_back(Run({8, 256, 1}, {r})[0]);
  // All at once: a 24-token budget (prefills are chunked) and 40 blocks
  // (some requests wait for others to finish).
  EXPECT_EQ(Run({40, 24, 32}, reqs), solo);
  // Batch sizes 1 to 32 by the running limit.
  for (int running : {2, 7, 32}) EXPECT_EQ(Run({256, 256, running}, reqs), solo) << running;
}

TEST_F(EngineTest, RefusesWhatCanNeverRunAndCancels) {
  auto engine = *Engine::Create(model_.get(), {4, 64, 8});
  EngineRequest r;
  EXPECT_EQ(engine->Submit(r).status().code(), absl::StatusCode::kInvalidArgument);  // empty
  r.prompt = {300};
  EXPECT_EQ(engine->Submit(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.prompt = std::vector<int32_t>(60, 65);
  r.max_tokens = 10;  // 70 > context 64
  EXPECT_NE(engine->Submit(r).status().message().find("must fit the context"), std::string::npos);
  auto small = *Engine::Create(model_.get(), {2, 64, 8});
  r.prompt = std::vector<int32_t>(30, 65);
  r.max_tokens = 5;  // 35 tokens = 3 blocks > 2
  EXPECT_NE(small->Submit(r).status().message().find("KV blocks"), std::string::npos);
  r.prompt = std::vector<int32_t>(20, 65);
  const int64_t id = *engine->Submit(r);
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_GT(engine->blocks().used_blocks(), 0);
  ASSERT_TRUE(engine->Cancel(id).ok());
  EXPECT_EQ(engine->blocks().used_blocks(), 0);
  EXPECT_TRUE(engine->idle());
}

}  // namespace
}  // namespace ladder
