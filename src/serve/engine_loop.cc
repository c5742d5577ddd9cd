#include "src/serve/engine_loop.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size(), 0) {}

void Histogram::Observe(double value) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (value <= bounds[i]) ++counts[i];
  }
  ++count;
  sum += value;
}

absl::StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(Gpt* model, const Options& options) {
  if (options.max_waiting < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_waiting must be >= 1, got ", options.max_waiting));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, options.engine));
  std::unique_ptr<EngineLoop> loop(new EngineLoop(std::move(engine), options));
  loop->thread_ = std::thread([l = loop.get()] { l->Run(); });
  return loop;
}

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, const Options& options)
    : engine_(std::move(engine)),
      max_waiting_(options.max_waiting),
      remote_prefill_(options.remote_prefill),
      kv_blocks_(engine_->blocks().num_blocks()) {
  UpdateGauges();
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    paused_ = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<int64_t> EngineLoop::Submit(EngineRequest request, Callback on_event) {
  Submission sub{std::move(request), std::move(on_event)};
  // A one-token prompt has nothing to ship: its only token is the one the
  // engine runs itself before sampling.
  if (remote_prefill_ != nullptr && sub.request.prompt.size() >= 2 && !sub.request.echo_logprobs) {
    RETURN_IF_ERROR(engine_->Check(sub.request));
    ASSIGN_OR_RETURN(sub.prefilled, remote_prefill_->Prefill(sub.request.prompt));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (draining_ || stopping_) {
    return absl::UnavailableError("the server is shutting down and admits no new requests");
  }
  submissions_.push_back(&sub);
  wake_.notify_all();
  answered_.wait(lock, [&] { return sub.done; });
  return sub.result;
}

absl::StatusOr<std::vector<float>> EngineLoop::Embed(const std::vector<int32_t>& tokens) {
  EmbedJob job{&tokens};
  std::unique_lock<std::mutex> lock(mu_);
  if (draining_ || stopping_) {
    return absl::UnavailableError("the server is shutting down and admits no new requests");
  }
  embeds_.push_back(&job);
  wake_.notify_all();
  answered_.wait(lock, [&] { return job.done; });
  return std::move(job.result);
}

void EngineLoop::RunEmbeds(std::unique_lock<std::mutex>& lock) {
  while (!embeds_.empty()) {
    EmbedJob* job = embeds_.front();
    embeds_.pop_front();
    // The forward runs unlocked, like a step: the engine is the loop
    // thread's alone, and submitters must not wait on the lock meanwhile.
    lock.unlock();
    absl::StatusOr<std::vector<float>> result = engine_->Embed(*job->tokens);
    lock.lock();
    job->result = std::move(result);
    job->done = true;
    answered_.notify_all();
  }
}

void EngineLoop::Cancel(int64_t id, FinishReason reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!live_.count(id)) return;
    cancels_.emplace_back(id, reason);
  }
  wake_.notify_all();
}

void EngineLoop::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  paused_ = false;
  paused_steps_ = 0;
  wake_.notify_all();
  drained_.wait(lock, [&] { return live_.empty() && submissions_.empty(); });
}

void EngineLoop::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void EngineLoop::StepPaused(int steps) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_steps_ += steps;
  }
  wake_.notify_all();
}

void EngineLoop::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    paused_steps_ = 0;
  }
  wake_.notify_all();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineLoop::UpdateGauges() {
  stats_.running = engine_->running();
  stats_.waiting = engine_->waiting() + static_cast<int>(submissions_.size());
  stats_.kv_blocks_used = engine_->blocks().used_blocks();
  stats_.kv_blocks_free = engine_->blocks().free_blocks();
  stats_.prompt_tokens_cached = engine_->stats().prompt_tokens_cached;
}

void EngineLoop::Finish(int64_t id, FinishReason reason, absl::Status error,
                        std::vector<std::pair<Callback, LoopEvent>>* deliver) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  LoopEvent e;
  e.finished = true;
  e.reason = reason;
  e.error = std::move(error);
  ++stats_.finished[static_cast<int>(reason)];
  deliver->emplace_back(std::move(it->second.callback), std::move(e));
  live_.erase(it);
}

void EngineLoop::ApplyQueued(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<Callback, LoopEvent>> deliver;
  if (!submissions_.empty()) {
    const Clock::time_point now = Clock::now();
    for (Submission* sub : submissions_) {
      const int64_t prompt = static_cast<int64_t>(sub->request.prompt.size());
      if (draining_ || stopping_) {
        sub->result =
            absl::UnavailableError("the server is shutting down and admits no new requests");
      } else if (engine_->waiting() >= max_waiting_) {
        sub->result = absl::ResourceExhaustedError(absl::StrCat(
            "the server is busy: ", engine_->waiting(), " requests are waiting; retry later"));
      } else {
        sub->result = sub->prefilled ? engine_->SubmitPrefilled(std::move(sub->request),
                                                                std::move(*sub->prefilled))
                                     : engine_->Submit(std::move(sub->request));
        if (sub->result.ok()) {
          live_[*sub->result] = Live{std::move(sub->callback), now, now, false};
          stats_.prompt_tokens += prompt;
        }
      }
      sub->done = true;
    }
    submissions_.clear();
    answered_.notify_all();
  }
  for (const auto& [id, reason] : cancels_) {
    if (!live_.count(id)) continue;  // finished meanwhile
    engine_->Cancel(id).IgnoreError();
    Finish(id, reason, absl::OkStatus(), &deliver);
  }
  cancels_.clear();
  UpdateGauges();
  if (!deliver.empty()) {
    lock.unlock();
    for (auto& [callback, event] : deliver) callback(event);
    lock.lock();
  }
}

void EngineLoop::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ApplyQueued(lock);
    if (live_.empty() && submissions_.empty()) drained_.notify_all();
    if (stopping_) break;
    RunEmbeds(lock);
    const bool work = (!paused_ || paused_steps_ > 0) && !engine_->idle();
    if (!work) {
      wake_.wait(lock, [&] {
        return stopping_ || !submissions_.empty() || !cancels_.empty() || !embeds_.empty() ||
               ((!paused_ || paused_steps_ > 0) && !engine_->idle());
      });
      continue;
    }
    if (paused_) --paused_steps_;
    lock.unlock();
    absl::StatusOr<std::vector<EngineEvent>> events = engine_->Step();
    const Clock::time_point now = Clock::now();
    lock.lock();

    std::vector<std::pair<Callback, LoopEvent>> deliver;
    if (events.ok()) {
      // One event per request per step, its tokens (and their scores) in order.
      std::map<int64_t, LoopEvent> by_request;
      std::vector<int64_t> order;
      for (EngineEvent& e : *events) {
        auto [it, inserted] = by_request.try_emplace(e.request);
        if (inserted) order.push_back(e.request);
        LoopEvent& le = it->second;
        if (e.token >= 0) le.tokens.push_back(e.token);  // (-1: a scored prompt, no token)
        if (e.logprob) le.logprobs.push_back(std::move(*e.logprob));
        if (!e.prompt_logprobs.empty()) le.prompt_logprobs = std::move(e.prompt_logprobs);
        if (e.finished) {
          le.finished = true;
          le.reason = e.constraint_done ? FinishReason::kStop : FinishReason::kLength;
        }
      }
      for (int64_t id : order) {
        auto live = live_.find(id);
        if (live == live_.end()) continue;  // cancelled meanwhile
        LoopEvent& e = by_request[id];
        Live& l = live->second;
        const auto n = static_cast<int64_t>(e.tokens.size());
        stats_.generated_tokens += n;
        if (!l.has_token) {
          stats_.ttft.Observe(Seconds(now - l.submitted));
          l.has_token = true;
        } else {
          for (int64_t i = 0; i < n; ++i) stats_.tpot.Observe(Seconds(now - l.last_token) / n);
        }
        l.last_token = now;
        if (e.finished) {
          ++stats_.finished[static_cast<int>(e.reason)];
          deliver.emplace_back(std::move(l.callback), std::move(e));
          live_.erase(live);
        } else {
          deliver.emplace_back(l.callback, std::move(e));
        }
      }
    } else {
      // The engine failed: every request ends with the error and its blocks return.
      std::vector<int64_t> ids;
      for (const auto& [id, live] : live_) ids.push_back(id);
      for (int64_t id : ids) {
        engine_->Cancel(id).IgnoreError();
        Finish(id, FinishReason::kError, events.status(), &deliver);
      }
    }
    UpdateGauges();
    lock.unlock();
    for (auto& [callback, event] : deliver) callback(event);
    lock.lock();
  }
  // Stopping: whatever is left is cancelled, and embeddings not yet run are refused.
  for (EmbedJob* job : embeds_) {
    job->result = absl::UnavailableError("the server is shutting down and admits no new requests");
    job->done = true;
  }
  embeds_.clear();
  answered_.notify_all();
  std::vector<std::pair<Callback, LoopEvent>> deliver;
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    engine_->Cancel(id).IgnoreError();
    Finish(id, FinishReason::kCancelled, absl::OkStatus(), &deliver);
  }
  UpdateGauges();
  drained_.notify_all();
  lock.unlock();
  for (auto& [callback, event] : deliver) callback(event);
}

}  // namespace ladder
