// A thread-safe front for the decoding engine (engine.h), for the HTTP
// server: handler threads submit and cancel requests; one background thread
// owns the Engine, runs Engine::Step whenever there is work, and hands each
// request's tokens to that request's callback.
//
// Threads: Submit, Cancel, Drain, Pause/Resume and stats() may be called
// from any thread. Submit and Cancel only queue work for the loop thread,
// which applies them between steps (Submit then waits for the engine's
// verdict, at most one step). Callbacks run on the loop thread, without any
// lock held, in order per request; they must be quick and must not call
// back into the loop. A request's events are: zero or more token events,
// then exactly one finished event (its reason), after which nothing more
// arrives. One step may give a request several tokens (speculative
// decoding); they arrive as one event. A request finishes with kLength at
// max_tokens (a max_tokens 0 request: one finished event with no tokens,
// carrying its prompt_logprobs), or with kStop when its constraint is
// complete.
//
// Admission: Submit fails with
//   InvalidArgument     the engine refuses the request (engine.h Submit),
//   ResourceExhausted   max_waiting requests already wait for a slot,
//   Unavailable         the loop is draining (Drain) and admits nothing.
// Cancel frees the request's KV blocks before the next step; its callback
// then gets a finished event with the reason given (kCancelled when the
// client went away, kStop when the server found a stop string).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/model/gpt.h"
#include "src/serve/engine.h"
#include "src/serve/remote_prefill.h"

namespace ladder {

enum class FinishReason { kLength, kStop, kCancelled, kError };
inline constexpr int kNumFinishReasons = 4;
// "length", "stop", "cancelled", "error" (OpenAI's finish_reason words).
const char* FinishReasonName(FinishReason reason);

struct LoopEvent {
  std::vector<int32_t> tokens;  // new tokens, in order (empty on a bare finish)
  std::vector<TokenLogprob> logprobs;         // one per token, when requested
  std::vector<TokenLogprob> prompt_logprobs;  // on the first event, with echo_logprobs
  bool finished = false;
  FinishReason reason = FinishReason::kLength;  // when finished
  absl::Status error;                           // when reason is kError
};

// Cumulative histogram in Prometheus' shape: counts[i] observations <= bounds[i].
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // one per bound (cumulative)
  int64_t count = 0;
  double sum = 0;

  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
};

// A snapshot for /metrics.
struct LoopStats {
  int running = 0;  // requests in the engine's batch
  int waiting = 0;  // accepted, not yet running
  int kv_blocks_used = 0, kv_blocks_free = 0;
  int64_t prompt_tokens = 0;     // of all accepted requests
  int64_t prompt_tokens_cached = 0;  // of those, found in the prefix cache (not computed)
  int64_t generated_tokens = 0;  // delivered to callbacks
  int64_t finished[kNumFinishReasons] = {};
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};  // seconds
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
};

class EngineLoop {
 public:
  using Callback = std::function<void(const LoopEvent&)>;

  struct Options {
    EngineConfig engine;
    int max_waiting = 256;  // accepted requests not yet running, at most
    // The decode role of a disaggregated server: prompts are run by this
    // prefill server (which must outlive the loop) instead of the engine.
    RemotePrefill* remote_prefill = nullptr;
  };

  // Creates the engine over `model` (which must outlive the loop) and
  // starts the loop thread.
  static absl::StatusOr<std::unique_ptr<EngineLoop>> Create(Gpt* model, const Options& options);
  // Cancels whatever is left (callbacks get kCancelled) and joins the thread.
  ~EngineLoop();

  // Queues a request; its id, or an error (see above). `on_event` receives
  // its events on the loop thread. With a remote prefill server, the
  // caller's thread first has the prompt run there (prompts of 2 tokens or
  // more, without echo_logprobs, which needs the prompt's logits here) and
  // Submit fails with its Unavailable or FailedPrecondition error, naming
  // the prefill server, when that fails.
  absl::StatusOr<int64_t> Submit(EngineRequest request, Callback on_event);
  // Drops the request (waiting or running) and frees its blocks; its
  // callback gets a finished event with `reason`. Unknown or already
  // finished ids are ignored.
  void Cancel(int64_t id, FinishReason reason = FinishReason::kCancelled);
  // Stops admitting (Submit returns Unavailable from now on), then waits
  // until every accepted request has finished.
  void Drain();
  // Holds the loop between steps until Resume (submits and cancels are
  // still applied); StepPaused lets `steps` more steps run meanwhile. For
  // tests that need a request to stay waiting, or running, for a while.
  void Pause();
  void StepPaused(int steps);
  void Resume();

  // The embedding of `tokens` (1 to context of them, ids in the vocabulary;
  // InvalidArgument otherwise): the mean over positions of the model's last
  // hidden state (after the final LayerNorm), scaled to unit L2 norm
  // (Engine::Embed). Runs on the loop thread between two steps (also while
  // paused); blocks the caller until done. Unavailable while draining or
  // shutting down, like Submit.
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& tokens);
  LoopStats stats() const;
  int kv_blocks() const { return kv_blocks_; }
  // Options::max_waiting: the most requests queued at once.
  int max_waiting() const { return max_waiting_; }

 private:
  struct Submission {
    EngineRequest request;
    Callback callback;
    std::optional<std::string> prefilled{};  // rows from the remote prefill
    bool done = false;
    absl::StatusOr<int64_t> result = absl::UnknownError("not submitted");
  };
  // An Embed call waiting for the loop thread (on the caller's stack).
  struct EmbedJob {
    const std::vector<int32_t>* tokens;
    bool done = false;
    absl::StatusOr<std::vector<float>> result = absl::UnknownError("not run");
  };
  struct Live {
    Callback callback;
    std::chrono::steady_clock::time_point submitted, last_token;
    bool has_token = false;
  };

  EngineLoop(std::unique_ptr<Engine> engine, const Options& options);
  void Run();
  // Loop thread: applies queued submits and cancels (mu_ held by `lock`,
  // released around callbacks).
  void ApplyQueued(std::unique_lock<std::mutex>& lock);
  // Loop thread: runs the queued embeddings (mu_ released around each).
  void RunEmbeds(std::unique_lock<std::mutex>& lock);
  void Finish(int64_t id, FinishReason reason, absl::Status error,
              std::vector<std::pair<Callback, LoopEvent>>* deliver);
  void UpdateGauges();

  std::unique_ptr<Engine> engine_;  // touched by the loop thread only
  const int max_waiting_;
  RemotePrefill* const remote_prefill_;
  const int kv_blocks_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // work for the loop thread
  std::condition_variable answered_;  // a submission got its verdict
  std::condition_variable drained_;   // live_ became empty
  std::deque<Submission*> submissions_;
  std::deque<EmbedJob*> embeds_;
  std::vector<std::pair<int64_t, FinishReason>> cancels_;
  std::map<int64_t, Live> live_;  // accepted and not finished
  bool draining_ = false;
  bool paused_ = false;
  int paused_steps_ = 0;  // steps allowed while paused
  bool stopping_ = false;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace ladder
