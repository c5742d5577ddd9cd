#include "src/serve/engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(Gpt* model, const EngineConfig& cfg) {
  if (cfg.kv_blocks <= 0 || cfg.max_batch_tokens <= 0 || cfg.max_running <= 0) {
    return absl::InvalidArgumentError(
        "the engine needs positive kv_blocks, max_batch_tokens and max_running");
  }
  ASSIGN_OR_RETURN(KvCache cache,
                   KvCache::Create(model->config(), model->backend(), cfg.kv_blocks, cfg.kv_format));
  return std::unique_ptr<Engine>(new Engine(model, cfg, std::move(cache)));
}

absl::StatusOr<int64_t> Engine::Submit(EngineRequest request) {
  const GptConfig& c = model_->config();
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", t, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  RETURN_IF_ERROR(request.sampling.Validate());
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (request.max_tokens < 1 || total > c.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", request.prompt.size(), " tokens) plus max_tokens (", request.max_tokens,
        ") must fit the context of ", c.context, " tokens, with max_tokens >= 1"));
  }
  if (KvBlockPool::BlocksFor(total) > pool_.num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request needs ", KvBlockPool::BlocksFor(total),
                     " KV blocks; the cache has ", pool_.num_blocks()));
  }
  const int64_t id = next_id_++;
  waiting_.emplace_back(id, std::move(request));
  return id;
}

absl::Status Engine::Cancel(int64_t request) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->first == request) {
      waiting_.erase(it);
      return absl::OkStatus();
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->id == request) {
      RETURN_IF_ERROR(pool_.Free(it->seq));
      running_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("no request ", request));
}

int64_t Engine::Outstanding(const Running& r) const {
  const int64_t total = static_cast<int64_t>(r.request.prompt.size()) + r.request.max_tokens;
  return KvBlockPool::BlocksFor(total) - static_cast<int64_t>(pool_.BlockTable(r.seq).size());
}

void Engine::Admit() {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_running) {
    EngineRequest& req = waiting_.front().second;
    // Every running request may still grow to its full length.
    int64_t promised = 0;
    for (const Running& r : running_) promised += Outstanding(r);
    const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
    if (KvBlockPool::BlocksFor(total) > pool_.free_blocks() - promised) return;
    absl::StatusOr<KvBlockPool::SequenceId> seq = pool_.AddSequence(req.prompt);
    if (!seq.ok()) return;  // (cannot happen after the check; stay queued if it does)
    Running r{waiting_.front().first,          std::move(req), *seq, {}, 0, 0,
              PhiloxStream(0, kSamplingStream)};
    r.tokens = r.request.prompt;
    r.rng = PhiloxStream(r.request.seed, kSamplingStream);
    running_.push_back(std::move(r));
    waiting_.pop_front();
  }
}

absl::StatusOr<std::vector<EngineEvent>> Engine::Step() {
  Admit();
  std::vector<EngineEvent> events;
  if (running_.empty()) return events;
  // Decoding requests first (one token each), then prefill chunks.
  std::vector<int64_t> take(running_.size(), 0);
  int64_t budget = cfg_.max_batch_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const int64_t pending = static_cast<int64_t>(running_[i].tokens.size()) - running_[i].computed;
    if (pending == 1) take[i] = 1, --budget;
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const int64_t pending = static_cast<int64_t>(running_[i].tokens.size()) - running_[i].computed;
    if (pending > 1) budget -= take[i] = std::min(pending, budget);
  }
  CachedTokens batch;
  std::vector<KvBlockPool::SequenceId> seqs;
  batch.max_blocks = 1;
  for (const Running& r : running_) {
    seqs.push_back(r.seq);
    batch.max_blocks =
        std::max<int>(batch.max_blocks, static_cast<int>(pool_.BlockTable(r.seq).size()));
  }
  batch.block_tables = pool_.BlockTables(seqs, batch.max_blocks);
  for (size_t i = 0; i < running_.size(); ++i) {
    for (int64_t k = 0; k < take[i]; ++k) {
      const int64_t p = running_[i].computed + k;
      batch.tokens.push_back(running_[i].tokens[p]);
      batch.seq.push_back(static_cast<int32_t>(i));
      batch.pos.push_back(static_cast<int32_t>(p));
    }
  }
  std::vector<float> logits;
  RETURN_IF_ERROR(model_->ForwardCached(batch, cache_, &logits));

  // Sample where a request's pending tokens are now all cached.
  const int V = model_->config().vocab_size;
  std::vector<float> row(V);
  int64_t at = 0;
  std::vector<Running> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    at += take[i];
    r.computed += take[i];
    if (take[i] == 0 || r.computed < static_cast<int64_t>(r.tokens.size())) {
      still.push_back(std::move(r));
      continue;
    }
    std::copy_n(logits.begin() + (at - 1) * V, V, row.begin());
    const int32_t next = SampleToken(row, r.request.sampling, &r.rng);
    r.tokens.push_back(next);
    ++r.generated;
    const bool done = r.generated >= r.request.max_tokens;
    events.push_back({r.id, next, done});
    if (done) {
      RETURN_IF_ERROR(pool_.Free(r.seq));
    } else {
      RETURN_IF_ERROR(pool_.Append(r.seq, {next}));
      still.push_back(std::move(r));
    }
  }
  running_ = std::move(still);
  return events;
}

}  // namespace ladder
