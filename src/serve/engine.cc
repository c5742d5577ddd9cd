#include "src/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

// InvalidArgument naming `what` unless every id is in [0, vocab).
absl::Status CheckVocabulary(absl::Span<const int32_t> ids, int vocab, const char* what) {
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

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
  RETURN_IF_ERROR(Check(request));
  const int64_t id = next_id_++;
  waiting_.emplace_back(id, std::move(request));
  return id;
}

absl::StatusOr<int64_t> Engine::SubmitPrefilled(EngineRequest request, std::string rows) {
  RETURN_IF_ERROR(Check(request));
  const int64_t tokens = static_cast<int64_t>(request.prompt.size()) - 1;
  const int64_t want = tokens * KvCache::BytesPerToken(model_->config(), cfg_.kv_format);
  if (static_cast<int64_t>(rows.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prefilled rows of ", tokens, " tokens take ", want, " bytes, got ", rows.size()));
  }
  ASSIGN_OR_RETURN(const int64_t id, Submit(std::move(request)));
  prefilled_[id] = std::move(rows);
  return id;
}

void Engine::AdoptPrefilled(Running& r) {
  auto it = prefilled_.find(r.id);
  if (it == prefilled_.end()) return;
  const int64_t tokens = static_cast<int64_t>(r.request.prompt.size()) - 1;
  // Rows of blocks shared through the prefix cache stay as they are.
  if (tokens > r.computed &&
      cache_.WriteRows(r.table, tokens, it->second, r.computed / kBlockTokens).ok()) {
    r.computed = tokens;
  }
  prefilled_.erase(it);
}

absl::Status Engine::Check(const EngineRequest& request) const {
  const GptConfig& c = model_->config();
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  RETURN_IF_ERROR(CheckVocabulary(request.prompt, c.vocab_size, "token"));
  RETURN_IF_ERROR(request.sampling.Validate());
  std::vector<int32_t> biased;
  for (const auto& [token, bias] : request.sampling.logit_bias) biased.push_back(token);
  RETURN_IF_ERROR(CheckVocabulary(biased, c.vocab_size, "logit_bias token"));
  if (request.logprobs < -1 || request.logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, 20] (or -1 for none), got ", request.logprobs));
  }
  if (request.max_tokens < (request.echo_logprobs ? 0 : 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 1 (0 only to score the prompt with echo_logprobs), got ",
                     request.max_tokens));
  }
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > c.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", request.prompt.size(), " tokens) plus max_tokens (", request.max_tokens,
        ") must fit the context of ", c.context, " tokens"));
  }
  if (request.constraint != nullptr && request.constraint->Done()) {
    return absl::InvalidArgumentError("the constraint is already complete: nothing may follow");
  }
  if (KvBlockPool::BlocksFor(total) > pool_.num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request needs ", KvBlockPool::BlocksFor(total),
                     " KV blocks; the cache has ", pool_.num_blocks()));
  }
  return absl::OkStatus();
}

absl::Status Engine::Release(const Running& r) {
  for (KvBlockPool::SequenceId s : r.seqs) RETURN_IF_ERROR(pool_.Free(s));
  return absl::OkStatus();
}

absl::Status Engine::Cancel(int64_t request) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->first == request) {
      waiting_.erase(it);
      prefilled_.erase(request);
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
  if (!draft_cache_ || !DrawsFromRawLogits(r.request)) return 0;
  return std::max(0, std::min(cfg_.speculate, r.request.max_tokens - r.generated - 1));
}

bool Engine::DrawsFromRawLogits(const EngineRequest& r) {
  return !r.sampling.AdjustsLogits() && r.constraint == nullptr;
}

bool Engine::NeedsHostLogits(const EngineRequest& r, int proposals, bool completes) {
  return proposals > 0 || r.echo_logprobs ||
         (completes && (r.logprobs >= 0 || !DrawsFromRawLogits(r)));
}

absl::StatusOr<int32_t> Engine::SampleAdjusted(Running& r, absl::Span<const float> row) {
  const EngineRequest& q = r.request;
  std::vector<float> logits(row.begin(), row.end());
  if (q.sampling.AdjustsLogits()) {
    // The first sample comes before any generated token: tokens is the prompt.
    if (!r.history) r.history.emplace(r.tokens);
    AdjustLogits(q.sampling, *r.history, absl::MakeSpan(logits));
  }
  if (q.constraint != nullptr) {
    std::vector<char> allowed;
    q.constraint->Allowed(q.max_tokens - r.generated, &allowed);
    bool any = false;
    for (size_t t = 0; t < logits.size() && t < allowed.size(); ++t) {
      if (allowed[t]) {
        any = true;
      } else {
        logits[t] = -std::numeric_limits<float>::infinity();
      }
    }
    if (!any || allowed.size() != logits.size()) {
      return absl::InternalError(
          absl::StrCat("the constraint of request ", r.id, " allows no token of the vocabulary"));
    }
  }
  const int32_t token = SampleToken(logits, q.sampling, &r.rng);
  if (q.constraint != nullptr) {
    const absl::Status accepted = q.constraint->Accept(token);
    if (!accepted.ok()) {
      return absl::InternalError(absl::StrCat("the constraint of request ", r.id,
                                              " refused token ", token, " that it allowed: ",
                                              std::string(accepted.message())));
    }
  }
  if (r.history) r.history->Add(token);
  return token;
}

absl::StatusOr<std::vector<float>> Engine::Embed(const std::vector<int32_t>& tokens) {
  const GptConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > c.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("an embedding input needs 1 to ", c.context, " tokens, got ", n));
  }
  RETURN_IF_ERROR(CheckVocabulary(tokens, c.vocab_size, "token"));
  const int blocks = KvBlockPool::BlocksFor(n);
  if (!embed_cache_ || embed_cache_->num_blocks() < blocks) {
    embed_cache_.reset();  // the old one goes before the new one is allocated
    ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(c, model_->backend(), blocks, KvFormat::kF32));
    embed_cache_.emplace(std::move(cache));
  }
  std::vector<float> hidden;
  RETURN_IF_ERROR(model_->PrefillHidden(tokens, *embed_cache_, &hidden));
  const int64_t C = c.n_embd;
  std::vector<double> mean(C, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < C; ++j) mean[j] += hidden[i * C + j];
  }
  double norm = 0;
  for (double& x : mean) {
    x /= static_cast<double>(n);
    norm += x * x;
  }
  norm = std::sqrt(norm);
  std::vector<float> out(C);
  // (A zero mean, which a real model does not produce, stays zero.)
  for (int64_t j = 0; j < C; ++j) out[j] = static_cast<float>(norm > 0 ? mean[j] / norm : 0.0);
  return out;
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
    // The prompt's cached prefix is in both caches already; a prompt
    // prefilled elsewhere brings the rest of its rows.
    r.computed = shared;
    r.draft_computed = shared;
    stats_.prompt_tokens_cached += shared;
    AdoptPrefilled(r);
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
        // A request finishing this step without proposals, or never
        // speculating, needs no draft.
        if (take[i] == 0 || (spec[i] == 0 && r.computed + take[i] == size) ||
            !DrawsFromRawLogits(r.request)) {
          continue;
        }
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
  // Where no request needs the target's logits on the host (to verify
  // proposals, score tokens, or adjust or constrain its draw) the device
  // draws every request's next token and only the ids come back
  // (Gpt::ForwardSample). Each uniform comes from the request's own RNG
  // exactly where SampleToken would draw it, so the tokens are the ones the
  // host would have drawn (token_sampling.h).
  bool host_logits = false;
  std::vector<TokenSampleSpec> specs;
  std::vector<int> spec_of(n, -1);  // request i's entry of specs
  for (size_t i = 0, at = 0; i < n; ++i) {
    const Running& r = running_[i];
    const EngineRequest& q = r.request;
    const int64_t first = static_cast<int64_t>(at);
    at += take[i] + spec[i];
    const bool completes =
        take[i] > 0 && r.computed + take[i] == static_cast<int64_t>(r.tokens.size());
    host_logits = host_logits || NeedsHostLogits(q, spec[i], completes);
    if (completes && q.max_tokens > 0) {
      spec_of[i] = static_cast<int>(specs.size());
      specs.push_back(TokenSampleSpec{first + take[i] - 1, q.sampling.temperature, q.sampling.top_k,
                                      q.sampling.top_p, 0});
    }
  }
  std::vector<int32_t> sampled;
  if (host_logits) {
    RETURN_IF_ERROR(model_->ForwardCached(batch, cache_, &logits));
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (spec_of[i] >= 0 && specs[spec_of[i]].temperature > 0) {
        specs[spec_of[i]].uniform = running_[i].rng.NextUniform();
      }
    }
    RETURN_IF_ERROR(model_->ForwardSample(batch, cache_, specs, &sampled));
    ++stats_.device_sampled;
  }
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
    const int top = std::max(0, r.request.logprobs);
    if (r.request.echo_logprobs) {
      // The row after position p scores prompt token p + 1.
      const int64_t prompt = static_cast<int64_t>(r.request.prompt.size());
      for (int64_t p = r.computed; p < r.computed + take[i] && p + 1 < prompt; ++p) {
        const absl::Span<const float> row(logits.data() + (first + p - r.computed) * V, V);
        r.prompt_logprobs.push_back(ScoreToken(row, r.tokens[p + 1], top));
      }
    }
    if (take[i] == 0 || r.computed + take[i] < size) {
      r.computed += take[i];
      r.draft_computed = draft_end[i];
      still.push_back(std::move(r));
      continue;
    }
    // Scores need every prompt row: a prefill that skipped some (a cached
    // prefix) must not have been used for this request.
    if (r.generated == 0 && r.request.echo_logprobs &&
        r.prompt_logprobs.size() + 1 != r.request.prompt.size()) {
      return absl::InternalError(absl::StrCat("request ", r.id, " scored ",
                                              r.prompt_logprobs.size(), " of its ",
                                              r.request.prompt.size() - 1, " prompt tokens"));
    }
    if (r.request.max_tokens == 0) {  // the prompt is scored: done
      EngineEvent e;
      e.request = r.id;
      e.token = -1;
      e.finished = true;
      e.prompt_logprobs = std::move(r.prompt_logprobs);
      events.push_back(std::move(e));
      RETURN_IF_ERROR(Release(r));
      continue;
    }
    // The raw rows the request's tokens come from (host logits only).
    absl::Span<const float> rows;
    Verdict v;
    if (!host_logits) {
      v.next = sampled[spec_of[i]];  // drawn on the device
    } else {
      rows = absl::MakeConstSpan(logits.data() + (first + take[i] - 1) * V,
                                 static_cast<size_t>(spec[i] + 1) * V);
      if (DrawsFromRawLogits(r.request)) {
        v = VerifyProposals(proposals[i], draft_dist[i], rows, r.request.sampling, &r.rng);
      } else {  // (no proposals: one row)
        ASSIGN_OR_RETURN(v.next, SampleAdjusted(r, rows));
      }
    }
    stats_.proposed += spec[i];
    stats_.accepted += v.accepted;
    // The accepted proposals' keys and values are in both caches (the
    // draft's only as far as it ran); the rows after them are stale and
    // will be overwritten.
    r.computed = size + v.accepted;
    r.draft_computed = std::min(draft_end[i], r.computed);
    std::vector<int32_t> out(proposals[i].begin(), proposals[i].begin() + v.accepted);
    out.push_back(v.next);
    const bool first_tokens = r.generated == 0;
    r.generated += static_cast<int>(out.size());
    const bool constraint_done = r.request.constraint != nullptr && r.request.constraint->Done();
    const bool done = r.generated >= r.request.max_tokens || constraint_done;
    for (size_t k = 0; k < out.size(); ++k) {
      r.tokens.push_back(out[k]);
      EngineEvent e;
      e.request = r.id;
      e.token = out[k];
      e.finished = done && k + 1 == out.size();
      e.constraint_done = constraint_done && e.finished;
      // Row k of `rows` is the raw distribution out[k] was drawn for.
      if (r.request.logprobs >= 0) e.logprob = ScoreToken(rows.subspan(k * V, V), out[k], top);
      if (first_tokens && k == 0) e.prompt_logprobs = std::move(r.prompt_logprobs);
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
