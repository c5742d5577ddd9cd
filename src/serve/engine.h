// The decoding engine shared by `generate` (and the server to come):
// continuous batching over a paged KV cache, with optional speculative
// decoding.
//
// Requests wait in a queue and join the running batch at any step, as soon
// as the cache can hold their prompt and all the tokens they may generate
// (admission by KV capacity: the blocks are taken at admission, so a running
// request never runs out of them). Each step builds one batch within a token
// budget: first every request that is decoding, so running streams never
// stall, then chunks of waiting prompts (chunked prefill) with what is left.
// One cached forward runs the whole batch (Gpt::ForwardCached); every
// request whose pending tokens are all in the batch samples its next token
// with its own RNG, so its output never depends on what else was batched
// with it. Requests leave when they reach max_tokens, and their blocks
// return.
//
// Speculative decoding (EngineConfig::draft, speculate = K): a small draft
// model, with its own KV cache over the same block tables, proposes K tokens
// per request in K cheap forwards; the target then checks all of them in one
// forward of K + 1 tokens per request and keeps a prefix by the speculative
// sampling rule (sampler.h VerifyProposals), so a step emits 1 to K + 1
// tokens per request, distributed exactly as the target alone would sample
// them (greedy: token for token the same). Decoding is memory-bound, so the
// target's forward over K + 1 tokens costs little more than over one.
//
// Prefix caching (EngineConfig::prefix_cache): a request whose prompt starts
// with full blocks whose keys and values are already cached, from a running
// request or a finished one whose blocks are not yet reclaimed, shares those
// blocks and starts its prefill after them, so a long common system prompt
// costs its prefill once. After each forward the engine marks the prompt
// blocks it completed as filled, per cache (KvBlockPool::MarkFilled); only
// blocks filled in the target's cache and, with speculation, the draft's are
// shared, and nobody writes into a block once it is shared. The prompt's last
// token always runs through the model (its logits give the first token), so
// the pool never shares the block holding it: a prompt entirely in the cache
// recomputes its last block (up to 16 tokens) into a private block rather
// than rewriting a row others read. (A recomputed row equals the cached one
// only if the forward is bit-for-bit independent of how the batch was cut,
// which no backend promises.) Requests with echo_logprobs need the logits
// of every prompt position, so they share nothing and compute their whole
// prompt. Outputs are the same with and without the cache wherever they
// are the same however requests are batched (as above): a shared row is the
// row the request would have computed itself, computed in another batch.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/sampler.h"
#include "src/serve/token_constraint.h"

namespace ladder {

struct EngineConfig {
  int kv_blocks = 256;         // cache capacity, in blocks of 16 tokens
  int max_batch_tokens = 256;  // tokens per step (decode tokens + prefill chunks)
  int max_running = 64;        // requests decoding at once
  KvFormat kv_format = KvFormat::kF32;
  // Speculative decoding: a draft model with the target's vocabulary and at
  // least its context (holding the whole model, outliving the engine), and
  // K, the tokens it proposes per step (0: off). The batch budget must fit
  // K + 1 tokens.
  Gpt* draft = nullptr;
  int speculate = 0;
  // Prefix caching (above); off, every request computes its whole prompt.
  bool prefix_cache = true;
};

// Counters since the engine was created.
struct EngineStats {
  int64_t proposed = 0;         // draft tokens the target checked
  int64_t accepted = 0;         // of those, the ones it kept
  int64_t target_forwards = 0;  // ForwardCached calls of the target
  int64_t draft_forwards = 0;   // and of the draft
  int64_t prompt_tokens_cached = 0;  // prompt tokens found in the prefix cache, not computed
};

// A token's log-probability under the model: log-softmax of the raw logits
// at its position (before temperature, penalties, bias and constraints, so
// it scores the text the way the model sees it).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  // The most likely tokens at that position, most likely first (ties by id),
  // as many as the request's `logprobs` asks.
  std::vector<std::pair<int32_t, float>> top;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // at least one token
  // Tokens to generate; 0 runs the prompt only (with echo_logprobs, to score it).
  int max_tokens = 16;
  SamplingParams sampling;
  uint64_t seed = 0;
  // -1: no log-probabilities; 0..20: each generated token's, with the top
  // `logprobs` alternatives.
  int logprobs = -1;
  // The log-probability of every prompt token after the first (the same
  // `logprobs` alternatives), delivered with the request's first event.
  bool echo_logprobs = false;
  // Optional: which tokens may come next (token_constraint.h); the request
  // finishes as soon as the constraint is Done.
  std::shared_ptr<TokenConstraint> constraint;
};

// One generated token. `finished` marks the request's last event.
struct EngineEvent {
  int64_t request = 0;
  int32_t token = 0;  // -1: no token (a max_tokens 0 request's only event)
  bool finished = false;
  bool constraint_done = false;  // finished because the constraint completed
  std::optional<TokenLogprob> logprob;  // with logprobs >= 0
  std::vector<TokenLogprob> prompt_logprobs;  // with echo_logprobs, on the first event
};

class Engine {
 public:
  // `model` must hold the whole model and outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(Gpt* model, const EngineConfig& cfg);

  // Queues a request; InvalidArgument (naming the problem) if it can never
  // run: empty prompt, tokens outside the vocabulary, prompt plus max_tokens
  // beyond the context or the whole cache.
  absl::StatusOr<int64_t> Submit(EngineRequest request);
  // Drops a waiting or running request and frees its blocks.
  absl::Status Cancel(int64_t request);
  // Runs one batch; the tokens it produced, in request order (with
  // speculation, several for one request).
  absl::StatusOr<std::vector<EngineEvent>> Step();

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  const KvBlockPool& blocks() const { return pool_; }
  // Both models' caches.
  int64_t kv_bytes() const;
  const EngineStats& stats() const { return stats_; }

 private:
  struct Running {
    int64_t id;
    EngineRequest request;
    // The pool sequences holding the request's blocks: [0] the prompt's
    // (sharing any cached prefix), then one private block each for the
    // tokens it generates.
    std::vector<KvBlockPool::SequenceId> seqs{};
    std::vector<int32_t> table{};   // the block table those make up
    std::vector<int32_t> tokens{};  // prompt + generated
    // Tokens whose keys and values the target has cached (from admission:
    // the shared prefix), and the draft.
    int64_t computed = 0;
    int64_t draft_computed = 0;
    int generated = 0;
    PhiloxStream rng;
  };
  Engine(Gpt* model, const EngineConfig& cfg, KvCache cache, std::optional<KvCache> draft_cache)
      : model_(model),
        cfg_(cfg),
        pool_(cfg.kv_blocks, cfg.speculate > 0 ? 2 : 1),
        cache_(std::move(cache)),
        draft_cache_(std::move(draft_cache)) {}
  void Admit();
  absl::Status Release(const Running& r);
  // Draft tokens the request may propose this step: K, but never so many
  // that the step could pass max_tokens (nor so the context).
  int Lookahead(const Running& r) const;

  Gpt* model_;
  EngineConfig cfg_;
  KvBlockPool pool_;
  KvCache cache_;
  std::optional<KvCache> draft_cache_;  // with speculation
  std::deque<std::pair<int64_t, EngineRequest>> waiting_;
  std::vector<Running> running_;  // in admission order
  int64_t next_id_ = 0;
  EngineStats stats_;
};

}  // namespace ladder
