// The decoding engine shared by `generate` and `serve` (through EngineLoop):
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
// with it. Where no request of the step needs the logits on the host (no
// proposals to verify, no log-probabilities, adjustments or constraint),
// the tokens are drawn on the device (Gpt::ForwardSample) with the same
// uniforms, and a step copies back one id per request instead of its row
// of logits. Requests leave when they reach max_tokens, and their blocks
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
// Per-request extras, all applied where the request samples:
//   logit adjustments (SamplingParams: penalties, logit_bias) change a copy
//     of the target's logits row before the distribution is formed;
//   a constraint (EngineRequest::constraint) masks the tokens it does not
//     allow to -inf, then accepts the sampled token; once it is Done the
//     request finishes (EngineEvent::constraint_done);
//   log-probabilities score each generated token, and with echo_logprobs
//     each prompt token, by the raw logits (logprobs.h), read from the rows
//     the forward computes anyway (prefill chunks included).
// Which requests speculate: adjustments and constraints depend on the
// tokens before each position, which the draft's proposals would have to
// follow exactly, so a request with either never speculates (its Lookahead
// is 0) and samples one token per step, as without a draft.
// Log-probabilities only read the target's raw rows, which verification
// computes for every emitted token, so they do not stop speculation.
// Speculating and plain requests share every batch; each still samples only
// from its own rows and RNG.
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
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/logprobs.h"
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
  int64_t target_forwards = 0;  // forwards of the target
  // Of those, the ones whose tokens were drawn on the device (no request
  // needed the logits on the host: Gpt::ForwardSample).
  int64_t device_sampled = 0;
  int64_t draft_forwards = 0;   // and of the draft
  int64_t prompt_tokens_cached = 0;  // prompt tokens found in the prefix cache, not computed
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // at least one token
  // Tokens to generate; 0 runs the prompt only (with echo_logprobs, to score
  // it): the request then ends with one event carrying no token (-1) and
  // the prompt's log-probabilities.
  int max_tokens = 16;
  SamplingParams sampling;  // logit_bias ids must be in the vocabulary
  uint64_t seed = 0;
  // -1: no log-probabilities; 0..20: each generated token's, with the top
  // `logprobs` alternatives.
  int logprobs = -1;
  // The log-probability of every prompt token after the first (the same
  // `logprobs` alternatives, none with logprobs -1), delivered with the
  // request's first event. Needs the logits of every prompt position, so
  // such a request computes its whole prompt (a cached prefix saves it no
  // compute).
  bool echo_logprobs = false;
  // Optional: which tokens may come next (token_constraint.h); the request
  // finishes as soon as the constraint is Done. Used by the engine's thread
  // only, from Submit on; it must not be Done already.
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
  // run: empty prompt, tokens or logit_bias ids outside the vocabulary,
  // sampling parameters out of range (SamplingParams::Validate), logprobs
  // outside -1..20, max_tokens below 1 (0 only with echo_logprobs), prompt
  // plus max_tokens beyond the context or the whole cache, a constraint
  // already Done.
  absl::StatusOr<int64_t> Submit(EngineRequest request);
  // Submit's checks alone: OK when Submit would queue the request. Reads
  // only what Create fixed, so any thread may call it.
  absl::Status Check(const EngineRequest& request) const;
  // Submit for a request whose prompt was run elsewhere, by a model with
  // the same weights and KV format (prefill/decode disaggregation): `rows`
  // holds the keys and values of every prompt token but the last
  // (KvCache::ReadRows' layout, prompt - 1 tokens). At admission they are
  // written into this engine's cache, and the engine runs only the last
  // prompt token before sampling, so the request goes on exactly as after
  // Submit. (Should the write fail, the engine computes the prompt itself.)
  // InvalidArgument as Submit, or when `rows` is not that many tokens' rows.
  absl::StatusOr<int64_t> SubmitPrefilled(EngineRequest request, std::string rows);
  // Drops a waiting or running request and frees its blocks.
  absl::Status Cancel(int64_t request);
  // Runs one batch; the tokens it produced, in request order (with
  // speculation, several for one request). Internal if a constraint allows
  // no token or refuses one it allowed.
  absl::StatusOr<std::vector<EngineEvent>> Step();
  // The embedding of `tokens` (1 to context of them, ids in the vocabulary;
  // InvalidArgument otherwise): the mean over positions of the model's
  // final hidden state (after ln_f), scaled to unit L2 norm. One forward
  // through a KV cache of its own (fp32, kept and grown for the longest
  // input so far), so the requests' cache is untouched. Call it between
  // steps, from the thread that calls Step.
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& tokens);

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
    // With logit adjustments: the tokens they count (built at the first sample).
    std::optional<TokenHistory> history{};
    // With echo_logprobs: the prompt's scores so far, collected chunk by
    // chunk and handed to the first event.
    std::vector<TokenLogprob> prompt_logprobs{};
  };
  Engine(Gpt* model, const EngineConfig& cfg, KvCache cache, std::optional<KvCache> draft_cache)
      : model_(model),
        cfg_(cfg),
        pool_(cfg.kv_blocks, cfg.speculate > 0 ? 2 : 1),
        cache_(std::move(cache)),
        draft_cache_(std::move(draft_cache)) {}
  void Admit();
  // At admission: writes a SubmitPrefilled request's rows into the cache
  // and marks them computed.
  void AdoptPrefilled(Running& r);
  absl::Status Release(const Running& r);
  // Draft tokens the request may propose this step: K, but never so many
  // that the step could pass max_tokens (nor so the context); 0 for a
  // request that never speculates (DrawsFromRawLogits false).
  int Lookahead(const Running& r) const;
  // True for a request drawn from the target's raw logits: no logit
  // adjustments and no constraint. Only such a request speculates (see the
  // top) or draws on the device.
  static bool DrawsFromRawLogits(const EngineRequest& r);
  // True if this step needs the request's rows of logits on the host: it
  // has `proposals` to verify, echoes prompt log-probabilities, or
  // `completes` (samples its next token) and returns log-probabilities or
  // does not draw from the raw logits (its row is adjusted or masked first).
  static bool NeedsHostLogits(const EngineRequest& r, int proposals, bool completes);
  // Samples the next token of a request that does not speculate from `row`,
  // the raw logits after its last token: adjusts a copy of the row, masks
  // it by the constraint, samples, and advances the history and the
  // constraint by the token.
  absl::StatusOr<int32_t> SampleAdjusted(Running& r, absl::Span<const float> row);

  Gpt* model_;
  EngineConfig cfg_;
  KvBlockPool pool_;
  KvCache cache_;
  std::optional<KvCache> draft_cache_;  // with speculation
  std::optional<KvCache> embed_cache_;  // Embed's, made at its first call
  std::deque<std::pair<int64_t, EngineRequest>> waiting_;
  std::vector<Running> running_;  // in admission order
  std::map<int64_t, std::string> prefilled_;  // SubmitPrefilled's rows until admission
  int64_t next_id_ = 0;
  EngineStats stats_;
};

}  // namespace ladder
