// Continuous batching does not change what a request generates: 32 requests
// (greedy and seeded sampling, prompts of different lengths) run together
// under a small token budget and a cache too small for all of them at once
// give exactly the tokens each gives alone; every block comes back; requests
// that can never fit are refused with a reason; cancelling frees blocks.
//
// Prefix caching does not change it either: prompts sharing a prefix give the
// same tokens with the cache as without, which skips the prefix's prefill.
//
// Speculative decoding does not change it either: greedy output with any
// draft (the target itself, its int8 copy, an unrelated model) is the
// target's token for token; sampled output keeps the target's distribution
// (a chi-square test over 4000 requests) and is the same alone and batched.
//
// The per-request extras each equal a plain reference: logit adjustments (a
// decode that recomputes the whole context per token and applies the
// definitions over the vocabulary), log-probabilities of generated and
// prompt tokens (the log-softmax of an uncached forward), constraints (every
// output is in the constraint's language and ends with kStop), embeddings
// (the mean of Gpt::Forward's final hidden states); requests that do not
// speculate mix with ones that do without changing either.
#include "src/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/backend_factory.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/serve/engine_loop.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

// The tokens of each request by submit order, and the engine's counters.
struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

// Runs the requests to completion, checking that each gets exactly
// max_tokens tokens (fewer only when its constraint finished it), the last
// marked finished, and every block comes back. `events_out` (if given)
// receives every request's events.
Outcome RunAll(Gpt* model, const EngineConfig& cfg, const std::vector<EngineRequest>& reqs,
               std::vector<std::vector<EngineEvent>>* events_out = nullptr) {
  auto engine = *Engine::Create(model, cfg);
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) index[*engine->Submit(reqs[i])] = i;
  Outcome out;
  out.tokens.resize(reqs.size());
  std::vector<bool> finished(reqs.size(), false), constraint_done(reqs.size(), false);
  if (events_out != nullptr) events_out->assign(reqs.size(), {});
  int steps = 0;
  while (!engine->idle()) {
    auto events = engine->Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    for (const EngineEvent& e : *events) {
      const size_t i = index[e.request];
      EXPECT_FALSE(finished[i]) << "an event after the last, request " << i;
      if (e.token >= 0) out.tokens[i].push_back(e.token);  // (-1: a scored prompt)
      if (e.finished) finished[i] = true;
      if (e.constraint_done) constraint_done[i] = true;
      if (events_out != nullptr) (*events_out)[i].push_back(e);
    }
    EXPECT_LE(engine->blocks().used_blocks(), cfg.kv_blocks);
    if (++steps > 100000) break;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(finished[i]) << i;
    if (!constraint_done[i]) {
      EXPECT_EQ(out.tokens[i].size(), static_cast<size_t>(reqs[i].max_tokens)) << i;
    }
  }
  EXPECT_EQ(engine->blocks().used_blocks(), 0);
  out.stats = engine->stats();
  return out;
}

EngineConfig Config(int kv_blocks, int max_batch_tokens, int max_running, Gpt* draft = nullptr,
                    int speculate = 0) {
  EngineConfig c;
  c.kv_blocks = kv_blocks;
  c.max_batch_tokens = max_batch_tokens;
  c.max_running = max_running;
  c.draft = draft;
  c.speculate = speculate;
  return c;
}

GptConfig Small(int n_layer, int n_embd, int context) {
  GptConfig c;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = n_embd;
  c.context = context;
  c.vocab_size = 256;
  return c;
}

// An inference model with `weights` (a whole model's), in `format`.
std::unique_ptr<Gpt> Inference(const GptConfig& cfg, Backend* be, const std::vector<float>& weights,
                               WeightFormat format = WeightFormat::kF32) {
  auto model = *Gpt::Create(cfg, be, 1, /*training=*/false);
  EXPECT_TRUE(model->SetWeights(weights.data()).ok());
  EXPECT_TRUE(model->QuantizeWeights(format).ok());
  return model;
}

std::vector<float> RandomWeights(const GptConfig& cfg, Backend* be, uint64_t seed) {
  auto model = *Gpt::Create(cfg, be, 1, /*training=*/false);
  EXPECT_TRUE(model->InitWeights(seed).ok());
  std::vector<float> w(model->table().total_floats());
  EXPECT_TRUE(model->GetWeights(w.data()).ok());
  return w;
}

// The model's next-token logits after `prompt`.
std::vector<float> LastLogits(Gpt* model, const std::vector<int32_t>& prompt) {
  KvBlockPool pool(KvBlockPool::BlocksFor(model->config().context));
  KvCache cache = *KvCache::Create(model->config(), model->backend(), pool.num_blocks());
  const KvBlockPool::SequenceId seq = *pool.AddSequence(prompt);
  CachedTokens batch;
  batch.max_blocks = pool.num_blocks();
  batch.block_tables = pool.BlockTables({seq}, batch.max_blocks);
  for (size_t p = 0; p < prompt.size(); ++p) {
    batch.tokens.push_back(prompt[p]);
    batch.seq.push_back(0);
    batch.pos.push_back(static_cast<int32_t>(p));
  }
  std::vector<float> logits;
  EXPECT_TRUE(model->ForwardCached(batch, cache, &logits).ok());
  const int V = model->config().vocab_size;
  return std::vector<float>(logits.end() - V, logits.end());
}

class EngineTest : public ::testing::Test {
 protected:
  // A model that has learned some text, so its distributions are peaked
  // like a real model's; trained once for all the tests.
  static void SetUpTestSuite() {
    std::vector<int32_t> data(4000);
    const char kText[] = "In the beginning God created the heaven and the earth. ";
    for (size_t i = 0; i < data.size(); ++i) data[i] = kText[i % (sizeof(kText) - 1)];
    RunConfig rc;
    rc.model = Small(2, 32, 64);
    rc.batch_size = 4;
    rc.steps = 60;
    rc.lr = 1e-2;
    rc.warmup_steps = 5;
    auto trainer = *Trainer::Create(rc, &be_, &data, &data, 0);
    for (int i = 0; i < rc.steps; ++i) ASSERT_TRUE(trainer->Step().ok());
    trained_weights_ = new std::vector<float>(trainer->model().table().total_floats());
    ASSERT_TRUE(trainer->model().GetWeights(trained_weights_->data()).ok());
  }
  static void TearDownTestSuite() { delete trained_weights_; }

  void SetUp() override { model_ = Inference(Small(2, 32, 64), &be_, *trained_weights_); }

  // The trained model with its final LayerNorm's weight and bias scaled by
  // `s`: its logits are the target's times s, so its distribution is the
  // target's at temperature 1 / s, related but clearly different.
  std::unique_ptr<Gpt> ScaledCopy(float s) const {
    std::vector<float> w = *trained_weights_;
    const ParameterTable& t = model_->table();
    for (const char* name : {"ln_f.weight", "ln_f.bias"}) {
      const int i = *t.Find(name);
      for (int64_t k = 0; k < t.numel(i); ++k) w[t.offset(i) + k] *= s;
    }
    return Inference(model_->config(), &be_, w);
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

  static CpuBackend be_;
  static std::vector<float>* trained_weights_;
  std::unique_ptr<Gpt> model_;
};

CpuBackend EngineTest::be_;
std::vector<float>* EngineTest::trained_weights_ = nullptr;

TEST_F(EngineTest, BatchedOutputsEqualSoloOutputs) {
  const std::vector<EngineRequest> reqs = Requests();
  std::vector<std::vector<int32_t>> solo;
  for (const EngineRequest& r : reqs)
    solo.push_back(RunAll(model_.get(), Config(8, 256, 1), {r}).tokens[0]);
  // All at once: a 24-token budget (prefills are chunked) and 40 blocks
  // (some requests wait for others to finish).
  EXPECT_EQ(RunAll(model_.get(), Config(40, 24, 32), reqs).tokens, solo);
  // Batch sizes 1 to 32 by the running limit.
  for (int running : {2, 7, 32}) {
    EXPECT_EQ(RunAll(model_.get(), Config(256, 256, running), reqs).tokens, solo) << running;
  }
}

TEST_F(EngineTest, RefusesWhatCanNeverRunAndCancels) {
  auto engine = *Engine::Create(model_.get(), Config(4, 64, 8));
  EngineRequest r;
  EXPECT_EQ(engine->Submit(r).status().code(), absl::StatusCode::kInvalidArgument);  // empty
  r.prompt = {300};
  EXPECT_EQ(engine->Submit(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.prompt = std::vector<int32_t>(60, 65);
  r.max_tokens = 10;  // 70 > context 64
  EXPECT_NE(engine->Submit(r).status().message().find("must fit the context"), std::string::npos);
  auto small = *Engine::Create(model_.get(), Config(2, 64, 8));
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

TEST_F(EngineTest, RefusesDraftsThatDoNotFit) {
  auto fails = [&](const EngineConfig& cfg, const std::string& says) {
    auto engine = Engine::Create(model_.get(), cfg);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find(says), std::string::npos) << engine.status();
  };
  fails(Config(8, 64, 4, nullptr, 3), "needs a draft model");
  fails(Config(8, 64, 4, model_.get(), -1), "speculate must be >= 0");
  fails(Config(8, 3, 4, model_.get(), 3), "must fit speculate + 1 = 4 tokens");
  GptConfig other = Small(1, 32, 32);  // context 32 < 64
  auto short_draft = Inference(other, &be_, RandomWeights(other, &be_, 1));
  fails(Config(8, 64, 4, short_draft.get(), 3), "at least its context (64)");
  other = Small(1, 32, 64);
  other.vocab_size = 300;
  auto wide_draft = Inference(other, &be_, RandomWeights(other, &be_, 1));
  fails(Config(8, 64, 4, wide_draft.get(), 3), "the target's vocabulary (256)");
}

// Greedy decoding with any draft is the target's greedy decoding, token for
// token, for K = 1, 3, 5, alone and 8 at a time (and under a budget that
// chunks the prefills). Random-weight models, width 64.
TEST_F(EngineTest, SpeculativeGreedyEqualsTheTargetAlone) {
  const GptConfig cfg = Small(2, 64, 128);
  const std::vector<float> weights = RandomWeights(cfg, &be_, 7);
  auto target = Inference(cfg, &be_, weights);
  auto self = Inference(cfg, &be_, weights);
  auto int8 = Inference(cfg, &be_, weights, WeightFormat::kInt8);
  const GptConfig small = Small(1, 32, 128);
  auto unrelated = Inference(small, &be_, RandomWeights(small, &be_, 8));
  std::vector<EngineRequest> reqs;
  PhiloxStream rng(5, 0);
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    for (int k = 0; k < 3 + 9 * i % 31; ++k)
      r.prompt.push_back(static_cast<int32_t>(rng.NextU32() % 256));
    r.max_tokens = 5 + 11 * i % 37;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  const std::vector<std::vector<int32_t>> alone =
      RunAll(target.get(), Config(64, 256, 8), reqs).tokens;
  for (auto [name, draft] : {std::pair<const char*, Gpt*>{"self", self.get()},
                             {"int8", int8.get()},
                             {"unrelated", unrelated.get()}}) {
    for (int k : {1, 3, 5}) {
      for (int running : {1, 8}) {
        const Outcome o = RunAll(target.get(), Config(64, 256, running, draft, k), reqs);
        EXPECT_EQ(o.tokens, alone) << name << " K " << k << " running " << running;
        EXPECT_GT(o.stats.proposed, 0);
        EXPECT_LE(o.stats.draft_forwards, k * o.stats.target_forwards);  // K rounds at most
        // The target itself proposes exactly what it would pick.
        if (draft == self.get()) {
          EXPECT_EQ(o.stats.accepted, o.stats.proposed) << k;
        }
      }
      const Outcome o = RunAll(target.get(), Config(64, 12, 8, draft, k), reqs);
      EXPECT_EQ(o.tokens, alone) << name << " K " << k << " budget 12";
    }
  }
}

// Prefix caching skips the cached prefix and changes no output: prompts
// sharing a 40-token prefix (one of them just its first 32 tokens, wholly in
// the cache; two identical), greedy and seeded sampling, give the same
// tokens with the cache as without, with and without speculation, fp32 and
// int8 KV, one at a time and four at once under a budget that chunks the
// prefills (with the model as its own draft, greedy requests only: see
// below). One at a time, the cache supplies exactly the full blocks before
// each prompt's last token that an earlier prompt has computed; a request
// scoring its prompt (echo_logprobs) takes none.
TEST_F(EngineTest, PrefixCacheSkipsTheSharedPrefixAndKeepsOutputs) {
  const GptConfig cfg = Small(2, 64, 128);
  const std::vector<float> weights = RandomWeights(cfg, &be_, 7);
  auto target = Inference(cfg, &be_, weights);
  auto self = Inference(cfg, &be_, weights);
  const GptConfig small = Small(1, 32, 128);
  auto unrelated = Inference(small, &be_, RandomWeights(small, &be_, 8));
  PhiloxStream rng(9, 0);
  auto random_tokens = [&rng](int n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(rng.NextU32() % 256);
    return t;
  };
  const std::vector<int32_t> prefix = random_tokens(40);
  std::vector<EngineRequest> reqs;
  auto add = [&](std::vector<int32_t> prompt) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = 2 + static_cast<int>(reqs.size()) % 5;
    r.seed = 50 + reqs.size();
    if (reqs.size() % 2 == 1) {
      r.sampling = {0.8, 20, 0.95};
    } else {
      r.sampling.temperature = 0;
    }
    reqs.push_back(std::move(r));
  };
  auto with_suffix = [&](int n) {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> s = random_tokens(n);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  // The prefix tokens each finds cached, one at a time:
  add(with_suffix(3));                                             // none: the first
  for (int n = 1; n <= 7; n += 2) add(with_suffix(n));             // 32 each (blocks 0, 1)
  add(std::vector<int32_t>(prefix.begin(), prefix.begin() + 32));  // 16: block 1 holds the last
  add(with_suffix(30));                                            // 32
  add(reqs.back().prompt);  // 64: the one before named and filled blocks 2 and 3
  add(reqs[1].prompt);      // none: it scores its prompt
  reqs.back().echo_logprobs = true;
  const int64_t expected_cached = 4 * 32 + 16 + 32 + 64;

  for (auto [name, draft, k] : {std::tuple<const char*, Gpt*, int>{"no draft", nullptr, 0},
                                {"self", self.get(), 3},
                                {"unrelated", unrelated.get(), 2}}) {
    for (KvFormat kv : {KvFormat::kF32, KvFormat::kInt8}) {
      for (int running : {1, 4}) {
        EngineConfig c = Config(64, running == 1 ? 256 : 20, running, draft, k);
        c.kv_format = kv;
        c.prefix_cache = false;
        const Outcome off = RunAll(target.get(), c, reqs);
        c.prefix_cache = true;
        const Outcome on = RunAll(target.get(), c, reqs);
        const std::string what =
            absl::StrCat(name, ", ", KvFormatName(kv), " KV, running ", running);
        for (size_t i = 0; i < reqs.size(); ++i) {
          // A model drafting for itself proposes from a distribution equal to
          // the target's up to rounding, so whether verification draws a
          // uniform (only when p < q) turns on the last bits of rows the two
          // models compute in differently shaped batches: seeded sampling is
          // then not reproducible across batchings, cache or no cache. Its
          // greedy output is.
          if (draft == self.get() && reqs[i].sampling.temperature > 0) continue;
          EXPECT_EQ(on.tokens[i], off.tokens[i]) << what << ", request " << i;
        }
        EXPECT_EQ(off.stats.prompt_tokens_cached, 0) << what;
        if (running == 1) {
          EXPECT_EQ(on.stats.prompt_tokens_cached, expected_cached) << what;
        } else {
          EXPECT_GT(on.stats.prompt_tokens_cached, 0) << what;
        }
      }
    }
  }
}

// A block is shared only once written, for the target and the draft alike:
// C arrives while A, with the same 40-token prefix, is two tokens into its
// prefill (B, done in one step, makes room), so C finds nothing cached and
// computes the prefix itself; and when A is cancelled five tokens in, C,
// coming after, finds nothing either. C's tokens are those it gives without
// the cache.
TEST_F(EngineTest, PrefixCacheNeverSharesABlockBeingComputed) {
  // The trained model, whose outputs depend on what it attends to.
  Gpt* target = model_.get();
  auto self = Inference(target->config(), &be_, *trained_weights_);
  const std::string text = "In the beginning God created the heaven and the earth.";
  const std::vector<int32_t> prefix(text.begin(), text.begin() + 40);
  std::vector<EngineRequest> reqs(3);
  reqs[0].prompt = {73, 110, 32};  // B
  reqs[0].max_tokens = 1;
  reqs[1].prompt = prefix;  // A
  reqs[1].prompt.push_back('e');
  reqs[2].prompt = prefix;  // C
  reqs[2].prompt.push_back('h');
  for (EngineRequest& r : reqs) r.sampling.temperature = 0;
  for (auto [draft, k] : {std::pair<Gpt*, int>{nullptr, 0}, {self.get(), 2}}) {
    EngineConfig c = Config(16, 5, 2, draft, k);
    c.prefix_cache = false;
    const Outcome off = RunAll(target, c, reqs);
    c.prefix_cache = true;
    const Outcome on = RunAll(target, c, reqs);
    EXPECT_EQ(on.tokens, off.tokens) << k;
    EXPECT_EQ(on.stats.prompt_tokens_cached, 0) << k;
    auto engine = *Engine::Create(target, c);
    const int64_t a = *engine->Submit(reqs[1]);
    ASSERT_TRUE(engine->Step().ok());  // A: 5 of its 41 tokens
    ASSERT_TRUE(engine->Cancel(a).ok());
    ASSERT_TRUE(engine->Submit(reqs[2]).ok());
    std::vector<int32_t> tokens;
    while (!engine->idle()) {
      auto events = engine->Step();
      ASSERT_TRUE(events.ok()) << events.status();
      for (const EngineEvent& e : *events) tokens.push_back(e.token);
    }
    EXPECT_EQ(tokens, off.tokens[2]) << k;
    EXPECT_EQ(engine->stats().prompt_tokens_cached, 0) << k;
  }
}

// A request's seeded output (greedy and top-k/top-p sampling) with a draft is
// the same alone and batched with others, under a small budget and a cache
// too small for all at once.
TEST_F(EngineTest, SeededSpeculativeOutputIsTheSameAloneAndBatched) {
  const std::vector<EngineRequest> reqs = Requests();
  auto draft = ScaledCopy(0.5f);
  std::vector<std::vector<int32_t>> solo;
  for (const EngineRequest& r : reqs) {
    solo.push_back(RunAll(model_.get(), Config(8, 256, 1, draft.get(), 3), {r}).tokens[0]);
  }
  EXPECT_EQ(RunAll(model_.get(), Config(40, 24, 32, draft.get(), 3), reqs).tokens, solo);
  for (int running : {7, 32}) {
    EXPECT_EQ(RunAll(model_.get(), Config(256, 256, running, draft.get(), 3), reqs).tokens, solo)
        << running;
  }
}

// The first generated token of 4000 requests with one prompt and seeds
// 0..3999, each checked by speculation (K = 3) against a draft whose
// distribution is the target's at twice the temperature, has the target's
// distribution p (its TokenDistribution, after top-k/top-p), not the draft's q.
// Pearson's chi-square over the tokens with N p >= 5 (the rest pooled in one
// bin), with d degrees of freedom, must stay under d + 6 sqrt(2 d): the
// statistic has mean d and standard deviation sqrt(2 d), and the bound is
// passed by chance with probability below 1e-5 for these d. Against q it
// must be far above. (Seeds are fixed, so the test is deterministic.)
TEST_F(EngineTest, SpeculationKeepsTheTargetsDistribution) {
  auto draft = ScaledCopy(0.5f);
  const std::string text = "In the beginning God cr";
  const std::vector<int32_t> prompt(text.begin(), text.end());
  const std::vector<float> target_logits = LastLogits(model_.get(), prompt);
  const std::vector<float> draft_logits = LastLogits(draft.get(), prompt);
  constexpr int kRequests = 4000;
  for (const SamplingParams& params :
       {SamplingParams{1.0, 0, 1.0}, SamplingParams{0.8, 20, 0.95}}) {
    std::vector<EngineRequest> reqs(kRequests);
    for (int i = 0; i < kRequests; ++i) {
      reqs[i].prompt = prompt;
      reqs[i].max_tokens = 4;
      reqs[i].sampling = params;
      reqs[i].seed = static_cast<uint64_t>(i);
    }
    const Outcome o = RunAll(model_.get(), Config(512, 1024, 64, draft.get(), 3), reqs);
    std::vector<double> counts(256, 0.0);
    for (const std::vector<int32_t>& t : o.tokens) counts[t[0]] += 1;
    const std::vector<double> p = TokenDistribution(target_logits, params);
    const std::vector<double> q = TokenDistribution(draft_logits, params);
    // Pearson's statistic against `dist` over its bins with expectation >= 5.
    auto chi_square = [&](const std::vector<double>& dist, int* df) {
      double stat = 0, rest_observed = 0, rest_expected = 0;
      *df = 0;
      for (int v = 0; v < 256; ++v) {
        const double e = kRequests * dist[v];
        if (e >= 5) {
          stat += (counts[v] - e) * (counts[v] - e) / e;
          ++*df;
        } else {
          rest_observed += counts[v];
          rest_expected += e;
        }
      }
      if (rest_expected > 0) {
        stat += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
      } else {
        --*df;  // no pooled bin: the counts' fixed sum takes one degree
      }
      return stat;
    };
    int df_p = 0, df_q = 0;
    const double against_p = chi_square(p, &df_p), against_q = chi_square(q, &df_q);
    const double bound_p = df_p + 6 * std::sqrt(2.0 * df_p);
    const double bound_q = df_q + 6 * std::sqrt(2.0 * df_q);
    EXPECT_GE(df_p, 3);
    EXPECT_LT(against_p, bound_p) << "temperature " << params.temperature;
    EXPECT_GT(against_q, 10 * bound_q) << "temperature " << params.temperature;
    // Total variation: the sample is close to p, and p is far from q.
    double tv_sample = 0, tv_draft = 0;
    for (int v = 0; v < 256; ++v) {
      tv_sample += std::abs(counts[v] / kRequests - p[v]) / 2;
      tv_draft += std::abs(q[v] - p[v]) / 2;
    }
    EXPECT_LT(tv_sample, 0.05);
    EXPECT_GT(tv_draft, 0.2);
    // Both halves of the rule ran: many proposals stood, many did not.
    const double rate = static_cast<double>(o.stats.accepted) / o.stats.proposed;
    EXPECT_GT(rate, 0.2);
    EXPECT_LT(rate, 0.95);
    std::printf(
        "temperature %.1f top-k %d: chi-square %.1f against p (d = %d, bound %.1f), %.1f "
        "against q (d = %d); TV(sample, p) %.4f, TV(p, q) %.3f; acceptance %.3f\n",
        params.temperature, params.top_k, against_p, df_p, bound_p, against_q, df_q, tv_sample,
        tv_draft, rate);
  }
}

// The log-softmax of a row, in double: the reference scores.
std::vector<double> LogSoftmax(const std::vector<float>& l) {
  const double max = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (float x : l) sum += std::exp(x - max);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - max - std::log(sum);
  return out;
}

// `got` scores `token` under `logits`, with the `top` most likely tokens:
// every value the reference's (1e-5), the k-th alternative as likely as the
// reference's k-th, in order, ties by id.
void ExpectScores(const TokenLogprob& got, const std::vector<float>& logits, int32_t token,
                  int top) {
  const std::vector<double> ref = LogSoftmax(logits);
  EXPECT_EQ(got.token, token);
  EXPECT_NEAR(got.logprob, ref[token], 1e-5);
  std::vector<double> sorted = ref;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  ASSERT_EQ(got.top.size(), static_cast<size_t>(top));
  for (int j = 0; j < top; ++j) {
    EXPECT_NEAR(got.top[j].second, ref[got.top[j].first], 1e-5) << j;
    EXPECT_NEAR(got.top[j].second, sorted[j], 1e-5) << j;
    if (j > 0) {
      const auto& a = got.top[j - 1];
      const auto& b = got.top[j];
      EXPECT_TRUE(a.second > b.second || (a.second == b.second && a.first < b.first)) << j;
    }
  }
}

// A test language: 1 to 5 digits, then '.'. It keeps to the budget rule:
// a digit only when a '.' still fits after it.
class DigitsThenDot : public TokenConstraint {
 public:
  void Allowed(int budget, std::vector<char>* allowed) const override {
    allowed->assign(256, 0);
    if (done_) return;
    if (digits_ < 5 && (budget >= 2 || digits_ == 0)) {
      for (int c = '0'; c <= '9'; ++c) (*allowed)[c] = 1;
    }
    if (digits_ > 0) (*allowed)['.'] = 1;
  }
  absl::Status Accept(int32_t token) override {
    if (!done_ && token >= '0' && token <= '9' && digits_ < 5) {
      ++digits_;
    } else if (!done_ && token == '.' && digits_ > 0) {
      done_ = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " does not fit"));
    }
    return absl::OkStatus();
  }
  bool Done() const override { return done_; }

 private:
  int digits_ = 0;
  bool done_ = false;
};

bool DigitsThenDotText(const std::vector<int32_t>& t) {
  if (t.size() < 2 || t.size() > 6 || t.back() != '.') return false;
  return std::all_of(t.begin(), t.end() - 1, [](int32_t c) { return c >= '0' && c <= '9'; });
}

// A request decoded the plain way: per token, the whole context through
// the model (LastLogits), the adjustments by their definitions over the
// whole vocabulary, the mask of `constraint` (a fresh copy of the
// request's), and a draw from the request's own stream.
std::vector<int32_t> ReferenceDecode(Gpt* model, const EngineRequest& r,
                                     TokenConstraint* constraint = nullptr) {
  const SamplingParams& p = r.sampling;
  const int V = model->config().vocab_size;
  PhiloxStream rng(r.seed, kSamplingStream);
  std::vector<int32_t> context = r.prompt, out;
  std::vector<int> count(V, 0);
  for (int k = 0; k < r.max_tokens; ++k) {
    std::vector<float> l = LastLogits(model, context);
    for (int v = 0; v < V; ++v) {
      if (std::find(context.begin(), context.end(), v) != context.end()) {
        l[v] = static_cast<float>(l[v] > 0 ? l[v] / p.repetition_penalty
                                            : l[v] * p.repetition_penalty);
      }
      if (count[v] > 0) {
        l[v] = static_cast<float>(l[v] - count[v] * p.frequency_penalty - p.presence_penalty);
      }
      for (const auto& [t, bias] : p.logit_bias) {
        if (t == v) l[v] = static_cast<float>(l[v] + bias);
      }
    }
    if (constraint != nullptr) {
      std::vector<char> allowed;
      constraint->Allowed(r.max_tokens - k, &allowed);
      for (int v = 0; v < V; ++v) {
        if (!allowed[v]) l[v] = -INFINITY;
      }
    }
    const int32_t t = SampleToken(l, p, &rng);
    out.push_back(t);
    context.push_back(t);
    ++count[t];
    if (constraint != nullptr) {
      EXPECT_TRUE(constraint->Accept(t).ok());
      if (constraint->Done()) break;
    }
  }
  return out;
}

// Penalties and bias, greedy and sampled, batched under a small budget, give
// exactly the plain decode's tokens, and each changes the output.
TEST_F(EngineTest, LogitAdjustmentsEqualThePlainDecode) {
  std::vector<EngineRequest> reqs = Requests();
  reqs.resize(8);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EngineRequest& r = reqs[i];
    r.max_tokens = 10;
    switch (i % 4) {
      case 0:
        r.sampling.repetition_penalty = 1.8;
        break;
      case 1:
        r.sampling.frequency_penalty = 1.5;
        r.sampling.presence_penalty = 0.7;
        break;
      case 2:
        r.sampling.logit_bias = {{'e', -100}, {'x', 6}};
        break;
      case 3:
        r.sampling.repetition_penalty = 0.8;  // < 1 favours repeats
        r.sampling.presence_penalty = -1;
        r.sampling.logit_bias = {{' ', 2.5}};
        break;
    }
  }
  const Outcome o = RunAll(model_.get(), Config(40, 24, 8), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(o.tokens[i], ReferenceDecode(model_.get(), reqs[i])) << i;
    EngineRequest plain = reqs[i];
    plain.sampling = SamplingParams(reqs[i].sampling.temperature, reqs[i].sampling.top_k,
                                    reqs[i].sampling.top_p);
    EXPECT_NE(o.tokens[i], RunAll(model_.get(), Config(8, 256, 1), {plain}).tokens[0]) << i;
  }
}

TEST_F(EngineTest, RefusesExtrasOutOfRange) {
  auto engine = *Engine::Create(model_.get(), Config(8, 64, 8));
  auto refused = [&](const EngineRequest& r) {
    absl::StatusOr<int64_t> id = engine->Submit(r);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(id.status().message());
  };
  EngineRequest r;
  r.prompt = {65, 66};
  r.max_tokens = 0;
  EXPECT_EQ(refused(r),
            "max_tokens must be >= 1 (0 only to score the prompt with echo_logprobs), got 0");
  r.max_tokens = 4;
  r.logprobs = 21;
  EXPECT_EQ(refused(r), "logprobs must be in [0, 20] (or -1 for none), got 21");
  r.logprobs = -1;
  r.sampling.logit_bias = {{65, 1}, {300, 1}};
  EXPECT_EQ(refused(r), "logit_bias token 300 is outside the vocabulary [0, 256)");
  r.sampling.logit_bias.clear();
  r.sampling.presence_penalty = 5;
  EXPECT_EQ(refused(r), "presence_penalty must be in [-2, 2], got 5");
  r.sampling.presence_penalty = 0;
  auto done = std::make_shared<DigitsThenDot>();
  ASSERT_TRUE(done->Accept('1').ok());
  ASSERT_TRUE(done->Accept('.').ok());
  r.constraint = done;
  EXPECT_EQ(refused(r), "the constraint is already complete: nothing may follow");
  EXPECT_TRUE(engine->idle());
}

// Every generated token's score is the log-softmax of the raw logits at its
// position (penalties and bias do not change it), with the top
// alternatives; with speculation too, where several tokens come per step.
TEST_F(EngineTest, LogprobsScoreEveryGeneratedToken) {
  std::vector<EngineRequest> reqs = Requests();
  reqs.resize(6);
  const int tops[] = {0, 5, 20, 1, -1, 3};
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].logprobs = tops[i];
    reqs[i].max_tokens = 6;
  }
  reqs[3].sampling.frequency_penalty = 2;
  auto draft = ScaledCopy(0.5f);
  for (Gpt* d : {static_cast<Gpt*>(nullptr), draft.get()}) {
    std::vector<std::vector<EngineEvent>> events;
    const Outcome o = RunAll(model_.get(), Config(40, 24, 8, d, d ? 3 : 0), reqs, &events);
    if (d != nullptr) {
      EXPECT_GT(o.stats.accepted, 0);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<int32_t> context = reqs[i].prompt;
      for (const EngineEvent& e : events[i]) {
        EXPECT_TRUE(e.prompt_logprobs.empty());
        if (reqs[i].logprobs < 0) {
          EXPECT_FALSE(e.logprob.has_value());
        } else {
          EXPECT_TRUE(e.logprob.has_value()) << i;
          if (e.logprob) {
            ExpectScores(*e.logprob, LastLogits(model_.get(), context), e.token, reqs[i].logprobs);
          }
        }
        context.push_back(e.token);
      }
    }
  }
}

// With no request needing its logits on the host, the device draws the
// tokens (Gpt::ForwardSample) from the same uniforms: the outputs equal the
// host-sampled ones token for token, on the CPU backend (the reference) and
// on the CUDA simulator (the kernel). A log-probability request forces the
// host path without changing the batches, so the logits are the same bits.
TEST_F(EngineTest, DeviceSamplingDrawsWhatTheHostDraws) {
  for (const char* device : {"cpu", "cuda-sim"}) {
    SCOPED_TRACE(device);
    auto backend = *MakeBackend(device);
    auto model = Inference(model_->config(), backend.get(), *trained_weights_);
    std::vector<EngineRequest> reqs = Requests();
    reqs.resize(std::string(device) == "cpu" ? 32 : 10);
    const Outcome on_device = RunAll(model.get(), Config(200, 64, 16), reqs);
    EXPECT_EQ(on_device.stats.device_sampled, on_device.stats.target_forwards);
    for (EngineRequest& r : reqs) r.logprobs = 0;
    const Outcome on_host = RunAll(model.get(), Config(200, 64, 16), reqs);
    EXPECT_EQ(on_host.stats.device_sampled, 0);
    EXPECT_EQ(on_device.tokens, on_host.tokens);
  }
}

// echo_logprobs scores every prompt token after the first, equal to the
// log-softmax of an uncached forward over the whole prompt, though the
// prefill runs in chunks over several steps; max_tokens 0 scores and stops.
TEST_F(EngineTest, EchoScoresThePromptAcrossPrefillChunks) {
  const std::string text = "In the beginning God created the heaven and the earth.";
  std::vector<EngineRequest> reqs(3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt.assign(text.begin(), text.begin() + 45 - 10 * i);
    reqs[i].echo_logprobs = true;
    reqs[i].sampling.temperature = 0;
  }
  reqs[0].max_tokens = 0;
  reqs[0].logprobs = 3;
  reqs[1].max_tokens = 2;
  reqs[1].logprobs = -1;
  reqs[2].max_tokens = 3;
  reqs[2].logprobs = 20;
  reqs[2].prompt = {'I'};  // one token: nothing to score
  std::vector<std::vector<EngineEvent>> events;
  RunAll(model_.get(), Config(16, 12, 4), reqs, &events);  // 12-token chunks
  ASSERT_EQ(events[0].size(), 1u);
  EXPECT_EQ(events[0][0].token, -1);
  EXPECT_TRUE(events[0][0].finished);
  EXPECT_FALSE(events[0][0].logprob.has_value());
  EXPECT_TRUE(events[2][0].prompt_logprobs.empty());
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<int32_t>& prompt = reqs[i].prompt;
    const int T = static_cast<int>(prompt.size());
    ASSERT_TRUE(model_->Forward(prompt.data(), nullptr, 1, T).ok());
    const std::vector<TokenLogprob>& got = events[i][0].prompt_logprobs;
    ASSERT_EQ(got.size(), static_cast<size_t>(T - 1)) << i;
    for (int t = 1; t < T; ++t) {
      std::vector<float> logits;
      ASSERT_TRUE(model_->LogitsAt(0, t - 1, &logits).ok());
      ExpectScores(got[t - 1], logits, prompt[t], std::max(0, reqs[i].logprobs));
    }
    for (size_t k = 1; k < events[i].size(); ++k) EXPECT_TRUE(events[i][k].prompt_logprobs.empty());
  }
}

// Every constrained output, greedy and sampled and under tight budgets, is
// in the constraint's language, equals the plain masked decode, and ends
// with constraint_done.
TEST_F(EngineTest, ConstraintsShapeTheOutputAndStop) {
  std::vector<EngineRequest> reqs = Requests();
  reqs.resize(12);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].max_tokens = 2 + static_cast<int>(i % 5) * 2;
    if (i % 3 == 2) reqs[i].sampling = SamplingParams(1.5, 0, 1.0);  // hot
    // The model likes '.' after any digit; half the requests push it away,
    // so that only the budget or the 5-digit limit ends them.
    if (i % 2 == 1) reqs[i].sampling.logit_bias = {{'.', -20}};
    reqs[i].constraint = std::make_shared<DigitsThenDot>();
  }
  std::vector<std::vector<EngineEvent>> events;
  const Outcome o = RunAll(model_.get(), Config(40, 24, 12), reqs, &events);
  size_t longest = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    longest = std::max(longest, o.tokens[i].size());
    EXPECT_TRUE(DigitsThenDotText(o.tokens[i])) << i;
    if (i % 2 == 1) {  // as many digits as the budget and the limit allow
      EXPECT_EQ(o.tokens[i].size(), std::min<size_t>(reqs[i].max_tokens, 6)) << i;
    }
    EXPECT_LE(o.tokens[i].size(), static_cast<size_t>(reqs[i].max_tokens));
    EXPECT_TRUE(events[i].back().constraint_done) << i;
    DigitsThenDot fresh;
    EXPECT_EQ(o.tokens[i], ReferenceDecode(model_.get(), reqs[i], &fresh)) << i;
  }
  EXPECT_EQ(longest, 6u);  // some reached the 5-digit limit
}

// With a draft, plain requests speculate and requests with adjustments or a
// constraint do not, in the same batches: each gives what it gives alone
// (the plain ones with the same draft, the others as the plain decode), and
// speculation did happen.
TEST_F(EngineTest, SpeculatingAndNonSpeculatingRequestsMix) {
  auto draft = ScaledCopy(0.5f);
  std::vector<EngineRequest> reqs = Requests();
  reqs.resize(12);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].max_tokens = 8;
    if (i % 3 == 1) reqs[i].sampling.frequency_penalty = 1;
    if (i % 3 == 2) reqs[i].constraint = std::make_shared<DigitsThenDot>();
  }
  const Outcome o = RunAll(model_.get(), Config(40, 24, 12, draft.get(), 3), reqs);
  EXPECT_GT(o.stats.proposed, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i % 3 == 0) {
      EngineRequest alone = reqs[i];
      EXPECT_EQ(o.tokens[i], RunAll(model_.get(), Config(8, 256, 1, draft.get(), 3), {alone}).tokens[0])
          << i;
    } else if (i % 3 == 1) {
      EXPECT_EQ(o.tokens[i], ReferenceDecode(model_.get(), reqs[i])) << i;
    } else {
      DigitsThenDot fresh;
      EXPECT_EQ(o.tokens[i], ReferenceDecode(model_.get(), reqs[i], &fresh)) << i;
    }
  }
}

// Through the loop: a scored prompt finishes with no tokens (kLength) and its
// scores; a constrained request finishes with kStop, one score per token.
TEST_F(EngineTest, LoopDeliversScoresAndStopReasons) {
  EngineLoop::Options options;
  options.engine = Config(16, 24, 4);
  auto loop = *EngineLoop::Create(model_.get(), options);
  std::mutex mu;
  std::map<int, std::vector<LoopEvent>> got;
  auto collect = [&](int key) {
    return [&, key](const LoopEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      got[key].push_back(e);
    };
  };
  EngineRequest score;
  score.prompt = {'I', 'n', ' ', 't', 'h', 'e'};
  score.max_tokens = 0;
  score.echo_logprobs = true;
  ASSERT_TRUE(loop->Submit(score, collect(0)).ok());
  EngineRequest digits;
  digits.prompt = {'I', 'n'};
  digits.max_tokens = 6;
  digits.logprobs = 2;
  digits.constraint = std::make_shared<DigitsThenDot>();
  ASSERT_TRUE(loop->Submit(digits, collect(1)).ok());
  loop->Drain();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_TRUE(got[0][0].finished);
  EXPECT_EQ(got[0][0].reason, FinishReason::kLength);
  EXPECT_TRUE(got[0][0].tokens.empty());
  EXPECT_EQ(got[0][0].prompt_logprobs.size(), 5u);
  std::vector<int32_t> tokens;
  size_t scores = 0;
  for (const LoopEvent& e : got[1]) {
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    EXPECT_EQ(e.logprobs.size(), e.tokens.size());
    scores += e.logprobs.size();
  }
  EXPECT_TRUE(DigitsThenDotText(tokens));
  EXPECT_EQ(scores, tokens.size());
  EXPECT_EQ(got[1].back().reason, FinishReason::kStop);
  EXPECT_EQ(loop->stats().finished[static_cast<int>(FinishReason::kStop)], 1);
}

// An embedding is the mean over positions of Gpt::Forward's final hidden
// states, at unit norm; it runs between the steps of a request in flight
// without changing that request's tokens; bad input is refused.
TEST_F(EngineTest, EmbedIsTheNormalizedMeanHiddenState) {
  const std::string text = "In the beginning God created the heaven and the earth.";
  const std::vector<std::vector<int32_t>> inputs = {{'I'},
                                                    std::vector<int32_t>(text.begin(), text.end())};
  std::vector<std::vector<double>> want;
  for (const std::vector<int32_t>& in : inputs) {
    const int T = static_cast<int>(in.size());
    ASSERT_TRUE(model_->Forward(in.data(), nullptr, 1, T).ok());
    std::vector<double> mean(model_->config().n_embd, 0.0);
    for (int t = 0; t < T; ++t) {
      std::vector<float> h;
      ASSERT_TRUE(model_->HiddenAt(0, t, &h).ok());
      for (size_t j = 0; j < h.size(); ++j) mean[j] += h[j] / T;
    }
    double norm = 0;
    for (double x : mean) norm += x * x;
    for (double& x : mean) x /= std::sqrt(norm);
    want.push_back(mean);
  }
  EngineRequest r = Requests()[2];  // greedy
  r.max_tokens = 12;
  const std::vector<int32_t> solo = RunAll(model_.get(), Config(8, 256, 1), {r}).tokens[0];

  EngineLoop::Options options;
  options.engine = Config(8, 8, 4);  // the request's prefill takes several steps
  auto loop = *EngineLoop::Create(model_.get(), options);
  std::mutex mu;
  std::vector<int32_t> tokens;
  loop->Pause();
  ASSERT_TRUE(loop->Submit(r, [&](const LoopEvent& e) {
                    std::lock_guard<std::mutex> lock(mu);
                    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
                  }).ok());
  loop->StepPaused(2);
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<std::vector<float>> e = loop->Embed(inputs[i]);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ(e->size(), want[i].size());
    double norm = 0;
    for (size_t j = 0; j < e->size(); ++j) {
      EXPECT_NEAR((*e)[j], want[i][j], 1e-5) << i << " " << j;
      norm += double{(*e)[j]} * (*e)[j];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  loop->Resume();
  EXPECT_EQ(loop->Embed({}).status().message(), "an embedding input needs 1 to 64 tokens, got 0");
  EXPECT_EQ(loop->Embed(std::vector<int32_t>(65, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Embed({'a', 300}).status().message(),
            "token 300 is outside the vocabulary [0, 256)");
  loop->Drain();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(tokens, solo);
}

}  // namespace
}  // namespace ladder
