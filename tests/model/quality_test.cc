// Quality gates of the serving formats, on a model this test trains: a GPT
// of 4 layers x 128 learns the King James Bible's bytes for a few hundred
// steps, then held-out text is scored by the KV-cached forward in every
// format. Compared with fp32 weights and fp32 KV cache:
//   bf16 and int8 weights (groups of 32 and per channel): mean KL(fp32 ||
//       format) of the next-token distributions <= 0.01, perplexity within
//       1%, both when a window goes through at once (prefill's kernels) and
//       kSmallBatch tokens at a time (the few-token kernels decoding uses);
//   int8 KV cache: adds <= 0.005 mean KL;
// and the engine's KV-cached greedy tokens equal full recomputation's
// (Gpt::Forward over the whole sequence at every step), token for token.
// Random weights would not do: their next-token distributions are nearly
// flat, where rounding hardly moves anything.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/serve/engine.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

std::string g_corpus;  // path from argv

constexpr int kContext = 64;

struct Trained {
  GptConfig cfg;
  std::vector<float> weights;
  std::vector<int32_t> held_out;
};

// Trains once for all tests: bytes of the first 400 KB as training data, the
// last 20 KB of the book (never seen) as held-out text.
const Trained& Model() {
  static const Trained* trained = [] {
    std::ifstream in(g_corpus, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    EXPECT_GT(text.size(), 1000000u) << "corpus " << g_corpus << " (scripts/setup.sh writes it)";
    auto* t = new Trained;
    std::vector<int32_t> train, val;
    for (size_t i = 0; i < 400000 && i < text.size(); ++i) {
      train.push_back(static_cast<unsigned char>(text[i]));
    }
    for (size_t i = text.size() - 20000; i < text.size(); ++i) {
      t->held_out.push_back(static_cast<unsigned char>(text[i]));
    }
    val.assign(t->held_out.begin(), t->held_out.begin() + 4000);
    RunConfig rc;
    rc.model.n_layer = 4;
    rc.model.n_head = 4;
    rc.model.n_embd = 128;
    rc.model.context = kContext;
    rc.model.vocab_size = 256;
    rc.batch_size = 12;
    rc.steps = 300;
    rc.lr = 3e-3;
    rc.min_lr = 3e-4;
    rc.warmup_steps = 30;
    rc.eval_batches = 1;
    CpuBackend be;
    auto trainer = *Trainer::Create(rc, &be, &train, &val, 0);
    double loss = 0;
    for (int i = 0; i < rc.steps; ++i) loss = trainer->Step()->loss;
    std::printf("trained %lld steps: loss %.3f\n", static_cast<long long>(rc.steps), loss);
    t->cfg = rc.model;
    t->weights.resize(trainer->model().table().total_floats());
    EXPECT_TRUE(trainer->model().GetWeights(t->weights.data()).ok());
    return t;
  }();
  return *trained;
}

// Next-token log-probabilities of every held-out position, window by window
// (each window one sequence through the paged cache, as `ladder eval
// --weights --kv` scores), `chunk` tokens per forward call.
std::vector<std::vector<double>> LogProbs(WeightFormat weights, KvFormat kv, int windows,
                                          int chunk = kContext) {
  const Trained& t = Model();
  CpuBackend be;
  auto model = *Gpt::Create(t.cfg, &be, 1, /*training=*/false);
  EXPECT_TRUE(model->SetWeights(t.weights.data()).ok());
  EXPECT_TRUE(model->QuantizeWeights(weights).ok());
  const int blocks = kContext / KvCache::kBlockTokens;
  KvCache cache = *KvCache::Create(t.cfg, &be, blocks, kv);
  std::vector<std::vector<double>> out;
  for (int w = 0; w < windows; ++w) {
    const std::vector<int32_t> window(t.held_out.begin() + w * kContext,
                                      t.held_out.begin() + (w + 1) * kContext);
    std::vector<float> logits;
    if (chunk == kContext) {
      EXPECT_TRUE(model->PrefillLogits(window, cache, &logits).ok());
    } else {
      CachedTokens step;
      for (int b = 0; b < blocks; ++b) step.block_tables.push_back(b);
      step.max_blocks = blocks;
      for (int p = 0; p < kContext; p += chunk) {
        step.tokens.assign(window.begin() + p, window.begin() + p + chunk);
        step.seq.assign(chunk, 0);
        step.pos.clear();
        for (int i = p; i < p + chunk; ++i) step.pos.push_back(i);
        std::vector<float> part;
        EXPECT_TRUE(model->ForwardCached(step, cache, &part).ok());
        logits.insert(logits.end(), part.begin(), part.end());
      }
    }
    const int V = t.cfg.vocab_size;
    for (int p = 0; p < kContext; ++p) {
      const float* row = logits.data() + p * V;
      double m = row[0], sum = 0;
      for (int v = 0; v < V; ++v) m = std::max<double>(m, row[v]);
      for (int v = 0; v < V; ++v) sum += std::exp(row[v] - m);
      std::vector<double> lp(V);
      for (int v = 0; v < V; ++v) lp[v] = row[v] - m - std::log(sum);
      out.push_back(std::move(lp));
    }
  }
  return out;
}

struct Gap {
  double kl = 0, ppl_ref = 0, ppl = 0;
};

// Mean KL(ref || got) over positions, and both perplexities of the held-out
// next tokens (the last position of each window has no next token inside
// the window and is left out of the perplexity).
Gap Compare(const std::vector<std::vector<double>>& ref,
            const std::vector<std::vector<double>>& got) {
  const Trained& t = Model();
  Gap g;
  double nll_ref = 0, nll = 0;
  int scored = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double kl = 0;
    for (size_t v = 0; v < ref[i].size(); ++v) kl += std::exp(ref[i][v]) * (ref[i][v] - got[i][v]);
    g.kl += kl;
    if (i % kContext != kContext - 1) {
      const int32_t next = t.held_out[i + 1];
      nll_ref -= ref[i][next];
      nll -= got[i][next];
      ++scored;
    }
  }
  g.kl /= static_cast<double>(ref.size());
  g.ppl_ref = std::exp(nll_ref / scored);
  g.ppl = std::exp(nll / scored);
  return g;
}

constexpr int kWindows = 24;

TEST(QualityTest, PackedWeightsStayCloseToFp32) {
  const auto ref = LogProbs(WeightFormat::kF32, KvFormat::kF32, kWindows);
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kInt8, WeightFormat::kInt8Channel}) {
    for (int chunk : {kContext, static_cast<int>(cpu::kSmallBatch)}) {
      const Gap g = Compare(ref, LogProbs(f, KvFormat::kF32, kWindows, chunk));
      std::printf(
          "%s weights, %d tokens per call: mean KL %.2e, perplexity %.4f vs fp32 %.4f "
          "(%+.3f%%)\n",
          WeightFormatName(f), chunk, g.kl, g.ppl, g.ppl_ref, 100 * (g.ppl / g.ppl_ref - 1));
      // The model must have learned something, or the gate means little
      // (uniform guessing over bytes is perplexity 256; this run reaches ~10).
      EXPECT_LT(g.ppl_ref, 12.0);
      EXPECT_LE(g.kl, 0.01) << WeightFormatName(f) << " " << chunk;
      EXPECT_LE(std::fabs(g.ppl / g.ppl_ref - 1), 0.01) << WeightFormatName(f) << " " << chunk;
    }
  }
}

TEST(QualityTest, Int8KvCacheAddsLittle) {
  const auto ref = LogProbs(WeightFormat::kF32, KvFormat::kF32, kWindows);
  const Gap kv = Compare(ref, LogProbs(WeightFormat::kF32, KvFormat::kInt8, kWindows));
  std::printf("int8 KV cache: mean KL %.2e, perplexity %.4f vs %.4f\n", kv.kl, kv.ppl, kv.ppl_ref);
  EXPECT_LE(kv.kl, 0.005);
  // On top of int8 weights, too.
  const auto w8 = LogProbs(WeightFormat::kInt8, KvFormat::kF32, kWindows);
  const Gap both = Compare(w8, LogProbs(WeightFormat::kInt8, KvFormat::kInt8, kWindows));
  std::printf("int8 KV on int8 weights: mean KL %.2e\n", both.kl);
  EXPECT_LE(both.kl, 0.005);
}

// Greedy decoding through the engine (paged cache, continuous batching of
// several prompts) against recomputing the whole sequence with the training
// forward for every new token.
TEST(QualityTest, CachedGreedyEqualsFullRecomputation) {
  const Trained& t = Model();
  CpuBackend be;
  auto model = *Gpt::Create(t.cfg, &be, 1, /*training=*/false);
  ASSERT_TRUE(model->SetWeights(t.weights.data()).ok());
  auto engine = *Engine::Create(model.get(), EngineConfig{});
  const int kPrompts = 4, kNew = 40;
  std::vector<std::vector<int32_t>> prompts, got(kPrompts);
  for (int i = 0; i < kPrompts; ++i) {
    const auto at = t.held_out.begin() + 1000 * i;
    prompts.emplace_back(at, at + 5 + 3 * i);
    EngineRequest r;
    r.prompt = prompts.back();
    r.max_tokens = kNew;
    r.sampling.temperature = 0;
    ASSERT_EQ(*engine->Submit(r), i);
  }
  while (!engine->idle()) {
    absl::StatusOr<std::vector<EngineEvent>> events = engine->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (const EngineEvent& e : *events) got[e.request].push_back(e.token);
  }
  for (int i = 0; i < kPrompts; ++i) {
    std::vector<int32_t> seq = prompts[i];
    for (int k = 0; k < kNew; ++k) {
      const int T = static_cast<int>(seq.size());
      ASSERT_TRUE(model->Forward(seq.data(), nullptr, 1, T).ok());
      std::vector<float> logits;
      ASSERT_TRUE(model->LogitsAt(0, T - 1, &logits).ok());
      seq.push_back(
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
    const std::vector<int32_t> want(seq.begin() + prompts[i].size(), seq.end());
    EXPECT_EQ(got[i], want) << "prompt " << i;
  }
}

}  // namespace
}  // namespace ladder

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: quality_test CORPUS\n");
    return 2;
  }
  ladder::g_corpus = argv[1];
  return RUN_ALL_TESTS();
}
