// The decoding engine shared by `generate` (and the server to come):
// continuous batching over a paged KV cache.
//
// Requests wait in a queue and join the running batch at any step, as soon
// as the cache can hold their prompt and all the tokens they may generate
// (admission by KV capacity: a running request never runs out of blocks).
// Each step builds one batch within a token budget: first one token for every
// request that is decoding, so running streams never stall, then chunks of
// waiting prompts (chunked prefill) with what is left. One cached forward
// runs the whole batch (Gpt::ForwardCached); every request whose pending
// tokens are all in the cache samples its next token with its own RNG, so
// its output never depends on what else was batched with it. Requests leave
// when they reach max_tokens or the context, and their blocks return.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/sampler.h"

namespace ladder {

struct EngineConfig {
  int kv_blocks = 256;         // cache capacity, in blocks of 16 tokens
  int max_batch_tokens = 256;  // tokens per step (decode tokens + prefill chunks)
  int max_running = 64;        // requests decoding at once
  KvFormat kv_format = KvFormat::kF32;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // at least one token
  int max_tokens = 16;
  SamplingParams sampling;
  uint64_t seed = 0;
};

// One generated token. `finished` marks the request's last event.
struct EngineEvent {
  int64_t request = 0;
  int32_t token = 0;
  bool finished = false;
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
  // Runs one batch; the tokens it produced, in request order.
  absl::StatusOr<std::vector<EngineEvent>> Step();

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  const KvBlockPool& blocks() const { return pool_; }
  int64_t kv_bytes() const { return cache_.bytes(); }

 private:
  struct Running {
    int64_t id;
    EngineRequest request;
    KvBlockPool::SequenceId seq;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t computed = 0;         // tokens whose keys and values are cached
    int generated = 0;
    PhiloxStream rng;
  };
  Engine(Gpt* model, const EngineConfig& cfg, KvCache cache)
      : model_(model), cfg_(cfg), pool_(cfg.kv_blocks), cache_(std::move(cache)) {}
  // Blocks the request may still claim beyond what it holds.
  int64_t Outstanding(const Running& r) const;
  void Admit();

  Gpt* model_;
  EngineConfig cfg_;
  KvBlockPool pool_;
  KvCache cache_;
  std::deque<std::pair<int64_t, EngineRequest>> waiting_;
  std::vector<Running> running_;  // in admission order
  int64_t next_id_ = 0;
};

}  // namespace ladder
