// Model-level properties: initialization, determinism, flash == naive,
// gradient accumulation, the model file, and the learning-rate schedule.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/model/model_file.h"
#include "src/train/lr_schedule.h"
#include "tests/model/small_gpt.h"

namespace ladder {
namespace {

// A vocabulary of 300, padded to 384: exercises the padding.
GptConfig SmallConfig() { return SmallGpt(16, 300); }

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  PhiloxStream rng(seed, 0);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng.NextU32() % vocab);
  return t;
}

TEST(GptTest, ParameterCountMatchesTable) {
  for (GptConfig c : {SmallConfig(), GptConfig{12, 12, 768, 1024, 50257}}) {
    ParameterTable table(GptParameterSpecs(c));
    EXPECT_EQ(table.total_floats(), c.NumParameters());
  }
  // GPT-2 small: 124,475,904 parameters with the 50,304-row padded embedding.
  EXPECT_EQ((GptConfig{12, 12, 768, 1024, 50257}).NumParameters(), 124475904);
}

TEST(GptTest, InitFollowsGpt2) {
  GptConfig c;
  c.n_layer = 4;
  c.n_embd = 128;
  c.vocab_size = 300;
  ParameterTable table(GptParameterSpecs(c));
  std::vector<float> w(table.total_floats());
  table.Initialize(w.data(), 7);
  auto stddev = [&](const std::string& name, int64_t rows) {
    const int i = *table.Find(name);
    const float* p = w.data() + table.offset(i);
    const int64_t n = rows * table.spec(i).shape.back();
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += double(p[k]) * p[k];
    return std::sqrt(s / n);
  };
  EXPECT_NEAR(stddev("h.0.mlp.fc.weight", 512), 0.02, 0.001);
  EXPECT_NEAR(stddev("h.1.attn.proj.weight", 128), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev("h.3.mlp.proj.weight", 128), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev("wte", 300), 0.02, 0.001);
  // Padded vocabulary rows are zero; LayerNorm gains one, biases zero.
  const float* wte = w.data() + table.offset(*table.Find("wte"));
  for (int64_t k = 300 * 128; k < 384 * 128; ++k) ASSERT_EQ(wte[k], 0.0f);
  EXPECT_EQ(w[table.offset(*table.Find("h.2.ln_1.weight"))], 1.0f);
  EXPECT_EQ(w[table.offset(*table.Find("h.2.attn.qkv.bias"))], 0.0f);
  EXPECT_FALSE(table.spec(*table.Find("h.0.ln_2.bias")).weight_decay);
  EXPECT_TRUE(table.spec(*table.Find("h.0.mlp.fc.weight")).weight_decay);
}

// Loss and all gradients of one forward/backward.
struct Pass {
  double loss;
  std::vector<float> grads;
};

Pass RunPass(const GptConfig& c, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt,
             int B, int T, uint64_t seed) {
  CpuBackend be;
  auto m = *Gpt::Create(c, &be, B, true);
  EXPECT_TRUE(m->InitWeights(seed).ok());
  EXPECT_TRUE(m->ZeroGrads().ok());
  Pass p;
  p.loss = *m->Forward(tok.data(), tgt.data(), B, T);
  EXPECT_TRUE(m->Backward(1.0f / (B * T)).ok());
  p.grads.resize(m->table().total_floats());
  std::memcpy(p.grads.data(), m->grads().f32(), p.grads.size() * sizeof(float));
  return p;
}

TEST(GptTest, InitialLossIsNearLogVocab) {
  GptConfig c = SmallConfig();
  const int B = 4, T = 16;
  auto tok = RandomTokens(B * T, c.vocab_size, 1), tgt = RandomTokens(B * T, c.vocab_size, 2);
  Pass p = RunPass(c, tok, tgt, B, T, 3);
  EXPECT_NEAR(p.loss, std::log(300.0), 0.1);
}

TEST(GptTest, SameSeedIsBitwiseIdenticalAndOtherSeedDiffers) {
  GptConfig c = SmallConfig();
  const int B = 3, T = 16;
  auto tok = RandomTokens(B * T, c.vocab_size, 1), tgt = RandomTokens(B * T, c.vocab_size, 2);
  Pass a = RunPass(c, tok, tgt, B, T, 5), b = RunPass(c, tok, tgt, B, T, 5);
  Pass d = RunPass(c, tok, tgt, B, T, 6);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)));
  EXPECT_NE(a.loss, d.loss);
}

TEST(GptTest, FlashAndNaiveAttentionGiveTheSameModel) {
  GptConfig c = SmallConfig();
  const int B = 2, T = 16;
  auto tok = RandomTokens(B * T, c.vocab_size, 1), tgt = RandomTokens(B * T, c.vocab_size, 2);
  Pass flash = RunPass(c, tok, tgt, B, T, 5);
  c.attention = AttentionKind::kNaive;
  Pass naive = RunPass(c, tok, tgt, B, T, 5);
  EXPECT_NEAR(flash.loss, naive.loss, 1e-5);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < flash.grads.size(); ++i) {
    diff += std::pow(double(flash.grads[i]) - naive.grads[i], 2);
    norm += std::pow(double(naive.grads[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
}

TEST(GptTest, ShorterSequencesAndBatchesUseTheSameArena) {
  GptConfig c = SmallConfig();
  CpuBackend be;
  auto m = *Gpt::Create(c, &be, 4, false);
  ASSERT_TRUE(m->InitWeights(1).ok());
  auto tok = RandomTokens(16, c.vocab_size, 1);
  // The logits of a prefix do not depend on what follows (causality), and
  // a batch of one equals the same row inside a batch of four.
  ASSERT_TRUE(m->Forward(tok.data(), nullptr, 1, 16).status().ok());
  std::vector<float> full, prefix;
  ASSERT_TRUE(m->LogitsAt(0, 6, &full).ok());
  ASSERT_TRUE(m->Forward(tok.data(), nullptr, 1, 7).status().ok());
  ASSERT_TRUE(m->LogitsAt(0, 6, &prefix).ok());
  for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(full[i], prefix[i], 1e-5);
  EXPECT_FALSE(m->Forward(tok.data(), nullptr, 5, 16).ok());  // batch beyond the arena
  EXPECT_FALSE(m->Forward(tok.data(), nullptr, 1, 17).ok());  // beyond the context
  std::vector<int32_t> bad = tok;
  bad[3] = c.vocab_size;
  EXPECT_EQ(m->Forward(bad.data(), nullptr, 1, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelFileTest, RoundTripAndCorruptionIsDetected) {
  GptConfig c = SmallConfig();
  c.attention = AttentionKind::kNaive;
  ParameterTable table(GptParameterSpecs(c));
  std::vector<float> w(table.total_floats());
  table.Initialize(w.data(), 11);
  const std::string path = testing::TempDir() + "/model.bin";
  ASSERT_TRUE(SaveModelFile(path, c, w).ok());
  auto loaded = LoadModelFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.ToText(), c.ToText());
  EXPECT_EQ(loaded->weights, w);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  write(flipped);
  EXPECT_EQ(LoadModelFile(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(LoadModelFile(path).status().message().find("checksum"), std::string::npos);
  write(bytes.substr(0, bytes.size() - 100));
  EXPECT_EQ(LoadModelFile(path).status().code(), absl::StatusCode::kDataLoss);
  write("not a model");
  EXPECT_EQ(LoadModelFile(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(LoadModelFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(LrScheduleTest, WarmupThenCosineToMin) {
  EXPECT_DOUBLE_EQ(LearningRate(0, 1000, 100, 1e-3, 1e-4), 1e-5);
  EXPECT_DOUBLE_EQ(LearningRate(99, 1000, 100, 1e-3, 1e-4), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(100, 1000, 100, 1e-3, 1e-4), 1e-3);
  EXPECT_NEAR(LearningRate(549, 1000, 100, 1e-3, 1e-4), 5.5e-4, 1e-6);
  EXPECT_DOUBLE_EQ(LearningRate(999, 1000, 100, 1e-3, 1e-4), 1e-4);
}

}  // namespace
}  // namespace ladder
