// The model, trainer, KV cache and engine are device-neutral: run on a
// backend that claims a device other than the CPU (tagged_backend.h), every
// view they hand to an op carries that device, the results are the CPU
// backend's bit for bit, and host data crosses over in few copies per step:
// a cached decode step of several sequences is one embedding call, one copy
// in and one copy out, and a training step reads its gradient norm in one copy.
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/model/gpt.h"
#include "src/serve/engine.h"
#include "src/serve/kv_blocks.h"
#include "src/train/trainer.h"
#include "tests/model/small_gpt.h"
#include "tests/model/tagged_backend.h"

namespace ladder {
namespace {

GptConfig Small() { return SmallGpt(32); }

std::string Mistagged(const TaggedBackend& be) { return absl::StrJoin(be.mistagged(), ", "); }

TEST(DeviceNeutralTest, TrainingTagsEveryViewAndReadsTheNormOnce) {
  std::vector<int32_t> data(3000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = "In the beginning God"[i % 20];
  RunConfig rc;
  rc.model = Small();
  rc.batch_size = 4;
  rc.total_batch_tokens = 2 * 4 * 32;  // two microbatches per step
  rc.steps = 3;
  rc.grad_clip = 0.5;  // so clipping applies
  TaggedBackend tagged;
  CpuBackend cpu;
  auto trainer = *Trainer::Create(rc, &tagged, &data, &data, 0);
  auto reference = *Trainer::Create(rc, &cpu, &data, &data, 0);
  const int M = trainer->microbatches();
  ASSERT_EQ(M, 2);
  const int tensors = trainer->model().table().size();
  for (int step = 1; step <= rc.steps; ++step) {
    tagged.ResetCalls();
    const StepRecord r = *trainer->Step();
    const StepRecord want = *reference->Step();
    EXPECT_EQ(r.loss, want.loss) << "step " << step;
    EXPECT_EQ(r.grad_norm, want.grad_norm) << "step " << step;
    // One sum of squares per gradient tensor, into slots read back at once:
    // the only copies back are each microbatch's losses and that one.
    EXPECT_EQ(tagged.calls("SumOfSquares"), tensors);
    EXPECT_EQ(tagged.calls("CopyToHost"), M + 1) << "step " << step;
    EXPECT_EQ(tagged.calls("EmbeddingForward"), M);
    EXPECT_EQ(tagged.calls("EmbeddingBackward"), M);
    // Tokens and targets, one copy each per microbatch (the positions were
    // staged once, with the batch shape, in the first step).
    if (step > 1) {
      EXPECT_EQ(tagged.calls("CopyFromHost"), 2 * M) << "step " << step;
    }
  }
  EXPECT_EQ(*trainer->ValidationLoss(), *reference->ValidationLoss());
  EXPECT_TRUE(tagged.mistagged().empty()) << Mistagged(tagged);
}

// Three sequences of different lengths prefilled together, then one decode
// step with each at its own position.
TEST(DeviceNeutralTest, CachedDecodeOfSeveralSequencesIsOneEmbeddingCall) {
  const GptConfig cfg = Small();
  const std::vector<std::vector<int32_t>> prompts = {
      {3, 1, 4, 1, 5}, {9, 2, 6, 5, 3, 5, 8, 9, 7}, {2, 7}};
  // (bf16 weights are the CPU's serving format: refused on a device backend,
  // below.)
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kInt8}) {
    SCOPED_TRACE(WeightFormatName(format));
    TaggedBackend tagged;
    CpuBackend cpu;
    auto model = *Gpt::Create(cfg, &tagged, 1, /*training=*/false);
    auto reference = *Gpt::Create(cfg, &cpu, 1, /*training=*/false);
    for (Gpt* m : {model.get(), reference.get()}) {
      ASSERT_TRUE(m->InitWeights(5).ok());
      ASSERT_TRUE(m->QuantizeWeights(format).ok());
    }
    auto cache = *KvCache::Create(cfg, &tagged, 8);
    auto reference_cache = *KvCache::Create(cfg, &cpu, 8);
    KvBlockPool pool(8);
    std::vector<KvBlockPool::SequenceId> ids;
    for (const auto& p : prompts) ids.push_back(*pool.AddSequence(p));
    CachedTokens prefill, decode;
    for (size_t s = 0; s < prompts.size(); ++s) {
      for (size_t p = 0; p < prompts[s].size(); ++p) {
        prefill.tokens.push_back(prompts[s][p]);
        prefill.seq.push_back(static_cast<int32_t>(s));
        prefill.pos.push_back(static_cast<int32_t>(p));
      }
      decode.tokens.push_back(static_cast<int32_t>(40 + s));
      decode.seq.push_back(static_cast<int32_t>(s));
      decode.pos.push_back(static_cast<int32_t>(prompts[s].size()));
    }
    for (CachedTokens* b : {&prefill, &decode}) {
      b->max_blocks = 1;
      b->block_tables = pool.BlockTables(ids, 1);
    }
    for (const CachedTokens* b : {&prefill, &decode}) {
      tagged.ResetCalls();
      std::vector<float> logits, want;
      ASSERT_TRUE(model->ForwardCached(*b, cache, &logits).ok());
      ASSERT_TRUE(reference->ForwardCached(*b, reference_cache, &want).ok());
      EXPECT_EQ(logits, want);
      EXPECT_EQ(tagged.calls("EmbeddingForward"), 1);
      EXPECT_EQ(tagged.calls("CopyFromHost"), 1);  // every id of the step at once
      EXPECT_EQ(tagged.calls("CopyToHost"), 1);    // every token's logits at once
    }
    EXPECT_TRUE(tagged.mistagged().empty()) << Mistagged(tagged);
  }
}

// bf16 weights with fp32 activations are a CPU format: a device backend's
// model refuses them when it packs its weights (so `serve --weights bf16
// --device cuda` fails at startup, not at its first request), and stays a
// working fp32 model.
TEST(DeviceNeutralTest, Bf16WeightsAreRefusedOnADeviceBackend) {
  const GptConfig cfg = Small();
  TaggedBackend tagged;
  CpuBackend cpu;
  auto model = *Gpt::Create(cfg, &tagged, 1, /*training=*/false);
  auto reference = *Gpt::Create(cfg, &cpu, 1, /*training=*/false);
  ASSERT_TRUE(model->InitWeights(3).ok());
  ASSERT_TRUE(reference->InitWeights(3).ok());
  const absl::Status s = model->QuantizeWeights(WeightFormat::kBF16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bf16 weights are a CPU serving format"), std::string::npos) << s;
  EXPECT_EQ(model->weight_format(), WeightFormat::kF32);
  ASSERT_TRUE(reference->QuantizeWeights(WeightFormat::kBF16).ok());  // the CPU packs them
  // The refused model still runs, as fp32.
  auto cache = *KvCache::Create(cfg, &tagged, 4);
  KvBlockPool pool(4);
  const std::vector<int32_t> prompt = {3, 1, 4};
  const KvBlockPool::SequenceId id = *pool.AddSequence(prompt);
  CachedTokens batch;
  for (size_t p = 0; p < prompt.size(); ++p) {
    batch.tokens.push_back(prompt[p]);
    batch.seq.push_back(0);
    batch.pos.push_back(static_cast<int32_t>(p));
  }
  batch.max_blocks = 1;
  batch.block_tables = pool.BlockTables({id}, 1);
  std::vector<float> logits;
  EXPECT_TRUE(model->ForwardCached(batch, cache, &logits).ok());
}

TEST(DeviceNeutralTest, EngineStepsAreOneEmbeddingCallEach) {
  const GptConfig cfg = Small();
  TaggedBackend tagged;
  auto model = *Gpt::Create(cfg, &tagged, 1, /*training=*/false);
  ASSERT_TRUE(model->InitWeights(7).ok());
  EngineConfig ec;
  ec.kv_blocks = 16;
  auto engine = *Engine::Create(model.get(), ec);
  for (int i = 0; i < 3; ++i) {
    EngineRequest r;
    r.prompt = std::vector<int32_t>(3 + 4 * i, 10 + i);
    r.max_tokens = 4;
    r.seed = i;
    ASSERT_TRUE(engine->Submit(r).ok());
  }
  tagged.ResetCalls();
  while (!engine->idle()) ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(tagged.calls("EmbeddingForward"), engine->stats().target_forwards);
  // No request needs its logits on the host: each step draws its tokens on
  // the device, and only the ids come back (SampleTokens), never logits.
  EXPECT_EQ(engine->stats().device_sampled, engine->stats().target_forwards);
  EXPECT_EQ(tagged.calls("SampleTokens"), engine->stats().target_forwards);
  EXPECT_EQ(tagged.calls("CopyToHost"), 0);
  EXPECT_TRUE(tagged.mistagged().empty()) << Mistagged(tagged);
}

}  // namespace
}  // namespace ladder
