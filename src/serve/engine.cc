#include "src/serve/engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

// The pool's cache indices (KvBlockPool::MarkFilled).
constexpr int kTargetCache = 0;
constexpr int kDraftCache = 1;

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(Gpt* model, const EngineConfig& cfg) {
  if (cfg.kv_blocks <= 0 || cfg.max_batch_tokens <= 0 || cfg.max_running <= 0) {
    return absl::InvalidArgumentError(
        "the engine needs positive kv_blocks, max_batch_tokens and max_running");
  }
  if (cfg.speculate < 0) {
    return absl::InvalidArgumentError(absl::StrCat("speculate must be >= 0, got ", cfg.speculate));
  }
  const GptConfig& c = model->config();
  ASSIGN_OR_RETURN(KvCache cache,
                   KvCache::Create(c, model->backend(), cfg.kv_blocks, cfg.kv_format));
  std::optional<KvCache> draft_cache;
  if (cfg.speculate > 0) {
    if (cfg.draft == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("speculate = ", cfg.speculate, " needs a draft model"));
    }
    const GptConfig& d = cfg.draft->config();
    if (d.vocab_size != c.vocab_size || d.context < c.context) {
      return absl::InvalidArgumentError(
          absl::StrCat("the draft model (vocabulary ", d.vocab_size, ", context ", d.context,
                       ") must have the target's vocabulary (", c.vocab_size,
                       ") and at least its context (", c.context, ")"));
    }
    if (cfg.max_batch_tokens < cfg.speculate + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_batch_tokens (", cfg.max_batch_tokens,
                       ") must fit speculate + 1 = ", cfg.speculate + 1, " tokens"));
    }
    // The draft's cache has as many blocks as the target's and is indexed by
    // the same block tables: one pool's bookkeeping (admission, prefix
    // sharing) serves both caches.
    ASSIGN_OR_RETURN(draft_cache,
                     KvCache::Create(d, cfg.draft->backend(), cfg.kv_blocks, cfg.kv_format));
  }
  return std::unique_ptr<Engine>(new Engine(model, cfg, std::move(cache), std::move(draft_cache)));
}

int64_t Engine::kv_bytes() const {
  return cache_.bytes() + (draft_cache_ ? draft_cache_->bytes() : 0);
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

absl::Status Engine::Release(const Running& r) {
  for (KvBlockPool::SequenceId s : r.seqs) RETURN_IF_ERROR(pool_.Free(s));
  return absl::OkStatus();
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
      RETURN_IF_ERROR(Release(*it));
      running_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("no request ", request));
}

int Engine::Lookahead(const Running& r) const {
  // The step emits at most K + 1 tokens, and the last one it emits is never
  // run through a model, so the highest position written is
  // prompt + max_tokens - 2: inside the context and the admitted blocks.
  return draft_cache_ ? std::min(cfg_.speculate, r.request.max_tokens - r.generated - 1) : 0;
}

void Engine::Admit() {
  // A one-token sequence holds one block of its own: only full blocks are
  // named and shared, so nothing else ever maps to it.
  static constexpr int32_t kPrivateBlock[] = {0};
  while (!waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_running) {
    EngineRequest& req = waiting_.front().second;
    // Every block the request will use is taken now. The prompt's sequence
    // shares any cached prefix; the generated tokens go to private blocks
    // instead of being appended to it, because a speculative step writes
    // keys and values up to K positions past the accepted tokens, and a
    // pool sequence only grows blocks by appending tokens, which names full
    // blocks after tokens the target may yet reject. With the whole table
    // fixed, a position's cache row never moves, and a rejected row is
    // simply overwritten later. (So generated text is not offered to later
    // prompts as a cached prefix.) Checking against every free block is
    // enough: blocks the prompt shares are not taken again.
    const size_t blocks =
        KvBlockPool::BlocksFor(static_cast<int64_t>(req.prompt.size()) + req.max_tokens);
    if (static_cast<int64_t>(blocks) > pool_.free_blocks()) return;
    const uint64_t seed = req.seed;
    Running r{.id = waiting_.front().first,
              .request = std::move(req),
              .rng = PhiloxStream(seed, kSamplingStream)};
    int64_t shared = 0;
    absl::StatusOr<KvBlockPool::SequenceId> seq =
        pool_.AddSequence(r.request.prompt, &shared, cfg_.prefix_cache && !r.request.echo_logprobs);
    while (seq.ok()) {
      r.seqs.push_back(*seq);
      const std::vector<int32_t>& t = pool_.BlockTable(*seq);
      r.table.insert(r.table.end(), t.begin(), t.end());
      if (r.table.size() >= blocks) break;
      seq = pool_.AddSequence(kPrivateBlock);
    }
    if (!seq.ok()) {  // (cannot happen after the check; stay queued if it does)
      Release(r).IgnoreError();
      waiting_.front().second = std::move(r.request);
      return;
    }
    r.tokens = r.request.prompt;
    // The prompt's cached prefix is in both caches already.
    r.computed = shared;
    r.draft_computed = shared;
    stats_.prompt_tokens_cached += shared;
    running_.push_back(std::move(r));
    waiting_.pop_front();
  }
}

absl::StatusOr<std::vector<EngineEvent>> Engine::Step() {
  Admit();
  std::vector<EngineEvent> events;
  if (running_.empty()) return events;
  const size_t n = running_.size();
  // Plan the batch: take[i] of the request's own pending tokens and spec[i]
  // draft proposals after them. Decoding requests (one pending token) go
  // first, then prefill chunks. A request whose pending tokens all fit
  // "completes": it samples after them, checking its proposals first. Its
  // K never shrinks to fit the budget, so its random draws, and so its
  // tokens, never depend on its neighbours; when the budget cannot hold the
  // proposals too, it stops one token short and completes in a later step.
  std::vector<int64_t> take(n, 0);
  std::vector<int> spec(n, 0);
  int64_t budget = cfg_.max_batch_tokens;
  for (bool decoding : {true, false}) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t pending =
          static_cast<int64_t>(running_[i].tokens.size()) - running_[i].computed;
      if ((pending == 1) != decoding) continue;
      const int k = Lookahead(running_[i]);
      if (pending + k <= budget) {
        take[i] = pending;
        spec[i] = k;
      } else {
        take[i] = std::min(pending - 1, budget);
      }
      budget -= take[i] + spec[i];
    }
  }
  // Both models index their caches by the same block tables, fixed at
  // admission; sequence i of a batch is running_[i].
  CachedTokens tables;
  tables.max_blocks = 1;
  for (const Running& r : running_) {
    tables.max_blocks = std::max(tables.max_blocks, static_cast<int>(r.table.size()));
  }
  tables.block_tables.assign(n * tables.max_blocks, -1);
  for (size_t i = 0; i < n; ++i) {
    std::copy(running_[i].table.begin(), running_[i].table.end(),
              tables.block_tables.begin() + i * tables.max_blocks);
  }
  auto add = [](CachedTokens& batch, size_t i, int32_t token, int64_t pos) {
    batch.tokens.push_back(token);
    batch.seq.push_back(static_cast<int32_t>(i));
    batch.pos.push_back(static_cast<int32_t>(pos));
  };
  const int V = model_->config().vocab_size;
  std::vector<float> logits;

  // The draft's rounds. Round 0 runs what the draft has not cached of each
  // request in the batch (the prefill chunk, or the last token or two the
  // previous step accepted) and proposes the first token; round j feeds
  // proposal j - 1 and proposes token j. Every draw uses the request's own
  // RNG.
  std::vector<std::vector<int32_t>> proposals(n);
  std::vector<std::vector<std::vector<double>>> draft_dist(n);
  std::vector<int64_t> draft_end(n);  // the draft's cached tokens after its rounds
  for (size_t i = 0; i < n; ++i) draft_end[i] = running_[i].draft_computed;
  const int rounds = draft_cache_ ? *std::max_element(spec.begin(), spec.end()) : 0;
  for (int j = 0; draft_cache_ && (j == 0 || j < rounds); ++j) {
    CachedTokens batch = tables;
    batch.tokens.clear();
    std::vector<int64_t> row(n, -1);  // the logits row request i samples from
    for (size_t i = 0; i < n; ++i) {
      Running& r = running_[i];
      const int64_t size = static_cast<int64_t>(r.tokens.size());
      if (j == 0) {
        // A request finishing this step without proposals needs no draft.
        if (take[i] == 0 || (spec[i] == 0 && r.computed + take[i] == size)) continue;
        for (int64_t p = r.draft_computed; p < r.computed + take[i]; ++p) {
          add(batch, i, r.tokens[p], p);
        }
        draft_end[i] = r.computed + take[i];
      } else if (j < spec[i]) {
        add(batch, i, proposals[i][j - 1], size + j - 1);
        draft_end[i] = size + j;
      } else {
        continue;
      }
      if (j < spec[i]) row[i] = static_cast<int64_t>(batch.tokens.size()) - 1;
    }
    if (batch.tokens.empty()) break;
    RETURN_IF_ERROR(cfg_.draft->ForwardCached(batch, *draft_cache_, &logits));
    ++stats_.draft_forwards;
    for (size_t i = 0; i < n; ++i) {
      if (row[i] < 0) continue;
      const absl::Span<const float> l(logits.data() + row[i] * V, V);
      draft_dist[i].push_back(TokenDistribution(l, running_[i].request.sampling));
      proposals[i].push_back(SampleFrom(draft_dist[i].back(), &running_[i].rng));
    }
  }

  // The target: each request's pending tokens and its proposals, one forward.
  CachedTokens batch = tables;
  for (size_t i = 0; i < n; ++i) {
    const Running& r = running_[i];
    for (int64_t p = r.computed; p < r.computed + take[i]; ++p) add(batch, i, r.tokens[p], p);
    for (int j = 0; j < spec[i]; ++j) {
      add(batch, i, proposals[i][j], static_cast<int64_t>(r.tokens.size()) + j);
    }
  }
  RETURN_IF_ERROR(model_->ForwardCached(batch, cache_, &logits));
  ++stats_.target_forwards;
  if (cfg_.prefix_cache) {
    // The prompt blocks the forwards completed may now be shared.
    for (size_t i = 0; i < n; ++i) {
      pool_.MarkFilled(running_[i].seqs[0], kTargetCache, running_[i].computed + take[i]);
      if (draft_cache_) pool_.MarkFilled(running_[i].seqs[0], kDraftCache, draft_end[i]);
    }
  }

  // Where a request completes: the target's rows from its last pending
  // token on decide which proposals stand and the token after them.
  int64_t at = 0;  // the request's first row
  std::vector<Running> still;
  for (size_t i = 0; i < n; ++i) {
    Running& r = running_[i];
    const int64_t first = at;
    at += take[i] + spec[i];
    const int64_t size = static_cast<int64_t>(r.tokens.size());
    if (take[i] == 0 || r.computed + take[i] < size) {
      r.computed += take[i];
      r.draft_computed = draft_end[i];
      still.push_back(std::move(r));
      continue;
    }
    const absl::Span<const float> rows(logits.data() + (first + take[i] - 1) * V,
                                       static_cast<size_t>(spec[i] + 1) * V);
    const Verdict v =
        VerifyProposals(proposals[i], draft_dist[i], rows, r.request.sampling, &r.rng);
    stats_.proposed += spec[i];
    stats_.accepted += v.accepted;
    // The accepted proposals' keys and values are in both caches (the
    // draft's only as far as it ran); the rows after them are stale and
    // will be overwritten.
    r.computed = size + v.accepted;
    r.draft_computed = std::min(draft_end[i], r.computed);
    std::vector<int32_t> out(proposals[i].begin(), proposals[i].begin() + v.accepted);
    out.push_back(v.next);
    r.generated += static_cast<int>(out.size());
    const bool done = r.generated >= r.request.max_tokens;
    for (size_t k = 0; k < out.size(); ++k) {
      r.tokens.push_back(out[k]);
      EngineEvent e;
      e.request = r.id;
      e.token = out[k];
      e.finished = done && k + 1 == out.size();
      events.push_back(std::move(e));
    }
    if (done) {
      RETURN_IF_ERROR(Release(r));
    } else {
      still.push_back(std::move(r));
    }
  }
  running_ = std::move(still);
  return events;
}

}  // namespace ladder
