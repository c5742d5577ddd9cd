// Serving with bf16 activations (Gpt::UseBf16Activations: W8A16 matmuls,
// bf16 rows everywhere else, f32 logits), on the simulator. What each
// asserts:
//  - a prefill's logits stay close to the unquantized fp32 model's: over 48
//    positions the largest logit error is below a tenth of the logits'
//    standard deviation (measured: 0.04 of it; a wrong fragment or scale
//    gives errors of the order of the spread itself), the mean KL divergence
//    of the next-token distributions is below 0.01 (quality_test's bound for
//    int8 weights) and the top token agrees at 90% of positions or more (the
//    measured values are printed);
//  - the whole forward is independent of the batch: the same sequence
//    prefilled at once, or as a chunk followed by one-token decode steps,
//    gives bitwise the same logits at every position (every op is per row
//    and runs the same operations wherever the row lands);
//  - PrefillHidden returns bf16 values widened (each one survives a round
//    trip through bf16);
//  - refusals, FailedPrecondition naming why: fp32 weights, and the CPU
//    backend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/backend_factory.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "tests/model/small_gpt.h"

namespace ladder {
namespace {

constexpr int kVocab = 256, kTokens = 48;

std::unique_ptr<Gpt> Make(Backend* be, WeightFormat weights, bool bf16) {
  auto model = *Gpt::Create(SmallGpt(128), be, 1, /*training=*/false);
  EXPECT_TRUE(model->InitWeights(11).ok());
  EXPECT_TRUE(model->QuantizeWeights(weights).ok());
  if (bf16) {
    EXPECT_TRUE(model->UseBf16Activations().ok());
  }
  return model;
}

std::vector<int32_t> Tokens() {
  PhiloxStream rng(5, 0);
  std::vector<int32_t> t;
  for (int i = 0; i < kTokens; ++i) t.push_back(static_cast<int32_t>(rng.NextU32() % kVocab));
  return t;
}

std::vector<float> Prefill(Backend* be, Gpt& model, const std::vector<int32_t>& tokens) {
  KvCache cache = *KvCache::Create(SmallGpt(128), be, 8, KvFormat::kF32);
  std::vector<float> logits;
  EXPECT_TRUE(model.PrefillLogits(tokens, cache, &logits).ok());
  return logits;
}

TEST(Bf16ActivationsTest, PrefillStaysCloseToTheFp32Model) {
  auto backend = *MakeBackend("cuda-sim");
  auto fp32 = Make(backend.get(), WeightFormat::kF32, false);
  auto w8a16 = Make(backend.get(), WeightFormat::kInt8, true);
  EXPECT_EQ(w8a16->activations(), DType::kBF16);
  const std::vector<int32_t> tokens = Tokens();
  const std::vector<float> want = Prefill(backend.get(), *fp32, tokens);
  const std::vector<float> got = Prefill(backend.get(), *w8a16, tokens);
  ASSERT_EQ(got.size(), want.size());
  // The logits' spread, and the largest error against it.
  double mean = 0, var = 0, worst = 0;
  for (float w : want) mean += w;
  mean /= static_cast<double>(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    var += (want[i] - mean) * (want[i] - mean);
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  const double spread = std::sqrt(var / static_cast<double>(want.size()));
  double kl = 0;
  int top_agree = 0;
  for (int t = 0; t < kTokens; ++t) {
    const float* p = want.data() + t * kVocab;
    const float* q = got.data() + t * kVocab;
    const float mp = *std::max_element(p, p + kVocab), mq = *std::max_element(q, q + kVocab);
    double zp = 0, zq = 0;
    for (int v = 0; v < kVocab; ++v) {
      ASSERT_TRUE(std::isfinite(q[v])) << t << "," << v;
      zp += std::exp(p[v] - mp);
      zq += std::exp(q[v] - mq);
    }
    for (int v = 0; v < kVocab; ++v) {
      const double lp = p[v] - mp - std::log(zp), lq = q[v] - mq - std::log(zq);
      kl += std::exp(lp) * (lp - lq);
    }
    top_agree += std::max_element(p, p + kVocab) - p == std::max_element(q, q + kVocab) - q;
  }
  kl /= kTokens;
  std::printf(
      "bf16 activations + int8 weights vs fp32: largest logit error %.3g of the logits' standard "
      "deviation %.3g, mean KL %.2e, top-1 agreement %d/%d\n",
      worst, spread, kl, top_agree, kTokens);
  EXPECT_LT(worst, 0.1 * spread);
  EXPECT_LT(kl, 0.01);
  EXPECT_GE(top_agree, kTokens * 9 / 10);
}

TEST(Bf16ActivationsTest, DecodeStepsEqualThePrefillBitwise) {
  auto backend = *MakeBackend("cuda-sim");
  auto model = Make(backend.get(), WeightFormat::kInt8, true);
  const std::vector<int32_t> tokens = Tokens();
  const std::vector<float> whole = Prefill(backend.get(), *model, tokens);
  // A chunk of 20, then one token at a time, into a fresh cache.
  KvCache cache = *KvCache::Create(SmallGpt(128), backend.get(), 8, KvFormat::kF32);
  const int chunk = 20;
  auto run = [&](int from, int n, std::vector<float>* logits) {
    CachedTokens batch;
    for (int t = from; t < from + n; ++t) {
      batch.tokens.push_back(tokens[t]);
      batch.seq.push_back(0);
      batch.pos.push_back(t);
    }
    batch.max_blocks = (from + n + KvCache::kBlockTokens - 1) / KvCache::kBlockTokens;
    for (int b = 0; b < batch.max_blocks; ++b) batch.block_tables.push_back(b);
    ASSERT_TRUE(model->ForwardCached(batch, cache, logits).ok());
  };
  std::vector<float> logits;
  run(0, chunk, &logits);
  for (int i = 0; i < chunk * kVocab; ++i) ASSERT_EQ(logits[i], whole[i]) << i;
  for (int t = chunk; t < kTokens; ++t) {
    run(t, 1, &logits);
    for (int v = 0; v < kVocab; ++v) {
      ASSERT_EQ(logits[v], whole[t * kVocab + v]) << "position " << t << ", token " << v;
    }
  }
}

TEST(Bf16ActivationsTest, HiddenStatesAreBf16Values) {
  auto backend = *MakeBackend("cuda-sim");
  auto model = Make(backend.get(), WeightFormat::kInt8, true);
  KvCache cache = *KvCache::Create(SmallGpt(128), backend.get(), 8, KvFormat::kF32);
  std::vector<float> hidden;
  ASSERT_TRUE(model->PrefillHidden(Tokens(), cache, &hidden).ok());
  ASSERT_EQ(hidden.size(), static_cast<size_t>(kTokens * 32));
  for (float h : hidden) ASSERT_EQ(Bf16ToFloat(FloatToBf16(h)), h);
}

TEST(Bf16ActivationsTest, RefusedWithoutInt8WeightsOrOnTheCpu) {
  auto sim = *MakeBackend("cuda-sim");
  auto fp32 = Make(sim.get(), WeightFormat::kF32, false);
  absl::Status s = fp32->UseBf16Activations();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "bf16 activations need int8 weights (the W8A16 matmul); this model holds fp32 weights");
  EXPECT_EQ(fp32->activations(), DType::kF32);
  auto cpu = *MakeBackend("cpu");
  auto on_cpu = Make(cpu.get(), WeightFormat::kInt8, false);
  s = on_cpu->UseBf16Activations();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("device backend"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
