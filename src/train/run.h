// TrainingRun: the policy of a training run around the trainer's steps.
//
// Trainer (src/train/trainer.h) computes optimizer steps; a run decides what
// happens between them, and reads as one story (Run):
//   1. restore: from --resume, or from the run's own checkpoints when an
//      earlier attempt left some (the supervisor's rerun), in any layout;
//      with --mem-save-every, first from the memory checkpoints of the
//      nodes (src/checkpoint/memory_checkpoint.h) when they are newer;
//   2. each step: gather every rank's compute time, naming a straggler
//      (src/train/straggler.h), and any request to stop (SIGUSR1); let the
//      Env see the step (faults); roll back to the last checkpoint after
//      too many bad steps (src/train/guard.h), commit an asynchronous save
//      that every rank has written, start the checkpoint that is due (by
//      steps or by minutes, agreed by all ranks) or else the memory
//      checkpoint that is due, record the first step's memory and traffic
//      per rank (ranks.json), write the metrics line and
//      the progress line;
//      With --trace, the steps of its window are recorded as a timeline
//      (src/train/step_trace.h), written once the window's last is done;
//   3. end: the last checkpoint committed, the memory checkpoints removed
//      (the run is complete), the pipeline bubble summarized,
//      OUT/report.html written (src/report/report.h).
// Where NVML exists, GPU telemetry is sampled into OUT/gpu.jsonl meanwhile.
// Everything that happens to the run as a whole goes to OUT/events.jsonl
// (src/train/events.h); faults come only through the Env (src/train/env.h).
//
// Collective: every rank of the world constructs its run with the same
// policy and calls Run together. Rank 0 alone writes metrics, events,
// ranks.json and progress lines. Single-threaded, apart from the checkpoint
// writer's own thread (src/checkpoint/checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/memory_checkpoint.h"
#include "src/core/timer.h"
#include "src/parallel/grid.h"
#include "src/train/env.h"
#include "src/train/events.h"
#include "src/train/metrics.h"
#include "src/train/step_trace.h"
#include "src/train/straggler.h"
#include "src/train/trainer.h"

namespace ladder {

// How a run saves, restores and records; `ladder train`'s flags.
struct RunPolicy {
  std::string out;             // run directory: metrics.jsonl, events.jsonl, ranks.json
  std::string checkpoint_dir;  // "": OUT/checkpoints
  std::string resume;          // a checkpoint to start from; "": the run's own, if any
  int64_t save_every = 0;      // steps between checkpoints (and one at the end); 0: none
  double save_every_minutes = 0;
  int64_t mem_save_every = 0;  // steps between in-memory checkpoints; 0: none
  int keep = 3;                // committed checkpoints kept
  bool async_save = false;     // write shards in the background
  bool strict = false;         // refuse a corrupt checkpoint instead of an earlier one
  int zero = 0;                // ZeRO stage, recorded in manifests
  // --resume-forget: what a resume deliberately does not restore
  // (Trainer::ForgetOnResume), to show what restoring it is for.
  Trainer::Forget resume_forget = Trainer::Forget::kNothing;
  StragglerOptions straggler;
  // What a named straggler triggers: "warn" (the progress line, metrics and
  // events name it) or "restart-without": the run also writes a checkpoint
  // at once, names the rank and its node in OUT/leave_out.json
  // (docs/formats.md) and ends with Cancelled (`ladder train` exits 75), for
  // the supervisor to restart the job without that node.
  std::string straggler_action = "warn";
  // The step timeline (src/train/step_trace.h): a Chrome trace of the
  // window's steps written here; "": none. An explicit window is cut to
  // the steps the run takes, the default one moved to fit them.
  std::string trace;
  StepWindow trace_steps;
  bool trace_steps_explicit = false;

  // InvalidArgument naming the first bad value.
  absl::Status Validate() const;
};

// What a run works on. Not owned; each must outlive the run.
struct RunParts {
  Trainer* trainer = nullptr;
  Backend* backend = nullptr;
  const Grid* grid = nullptr;
  Communicator* world = nullptr;  // every rank: agreements and gathers
  Env* env = Env::Default();
  // Rank 0 calls it with a checkpoint's directory before committing it, to
  // add files of its own (the tokenizer); may be empty.
  std::function<absl::Status(const std::string& dir)> write_extra;
};

class TrainingRun {
 public:
  // The policy must be valid (RunPolicy::Validate).
  TrainingRun(RunPolicy policy, RunParts parts);

  // True when Run will start from a disk checkpoint (then it replaces any
  // weights set before, such as --init-from's; so does a memory checkpoint
  // that Run finds newer).
  bool resuming() const { return !resume_from_.empty(); }

  // Restores, trains the remaining steps, finishes the last save. An error
  // in a step, a collective or a load ends the run (a failed save does not:
  // it is reported and the previous checkpoint stays the latest). Cancelled
  // when the run stopped itself to be restarted in another layout, after a
  // checkpoint of its last step: a straggler with restart-without, or
  // SIGUSR1 (the elastic supervisor's request to grow onto returned nodes;
  // Run installs the handler and restores the previous one as it returns).
  absl::Status Run();

 private:
  // From memory if it can, else from disk if there is a checkpoint.
  absl::Status Restore();
  // Whether the memory checkpoints restored the run (a line on stderr says
  // why not when they did not).
  absl::StatusOr<bool> RestoreFromMemory();
  // Says where the run resumed from (rank 0's stderr, the restore event).
  absl::Status Resumed(const std::string& from);
  absl::Status OnStep(StepRecord r);
  // Gathers every rank's compute seconds into r->rank_seconds, names a
  // straggler in r->straggler (acting on it as the policy says) and sets
  // stop_requested_ when any rank got SIGUSR1; collective.
  absl::Status GatherRankSeconds(StepRecord* r);
  // --straggler-action restart-without: checkpoint, leave_out.json, Cancelled.
  absl::Status LeaveOut(StepRecord* r);
  // Writes the checkpoint of `r.step` at once, then its metrics line, then
  // commits it: the state a stopped run is restarted from.
  absl::Status SaveNowAndLog(const StepRecord& r);
  // Back to the last checkpoint after max_bad_steps bad steps.
  absl::Status RollBack(int64_t step);
  // Whether a checkpoint is due after `step`; collective with minutes.
  absl::StatusOr<bool> SaveDue(int64_t step);
  // Starts the checkpoint of `r.step` (a synchronous one has written its
  // shards on return; OnStep commits it after the metrics line); sets
  // r.t_checkpoint (the stall).
  absl::Status Save(StepRecord* r);
  // Writes the memory checkpoint of `r.step`; adds its stall to
  // r.t_checkpoint. CommitToMemory commits it after the metrics line. A
  // failure of either is reported (MemoryFailed), not fatal.
  absl::Status SaveToMemory(StepRecord* r);
  absl::Status CommitToMemory(int64_t step);
  absl::Status MemoryFailed(int64_t step, const absl::Status& why);
  // A finished or failed save, on rank 0's stderr and in the events.
  void Report(const absl::StatusOr<std::string>& saved);
  absl::Status Log(const StepRecord& r);
  absl::Status Event(int64_t step, const std::string& kind, const std::string& detail);
  // Rank 0 (re)opens metrics.jsonl, keeping the records through the current
  // step (all of them for a fresh run).
  absl::Status OpenMetrics(bool fresh);
  absl::Status SummarizeBubble();
  absl::Status WriteReport();
  // The trace's call after `steps_done` steps (StepTrace::AtStep); rank 0
  // says where the file is once written. Collective when it writes.
  absl::Status TraceAt(int64_t steps_done);
  static constexpr int kTelemetryPeriodMs = 1000;
  bool lead() const { return parts_.grid->rank() == 0; }

  RunPolicy policy_;
  RunParts parts_;
  std::string resume_from_;
  CheckpointContext ckpt_;
  CheckpointWriter writer_;
  std::optional<MemoryCheckpointer> memory_;  // with --mem-save-every
  std::string mem_written_;                   // the memory checkpoint written, not yet committed
  std::optional<MetricsWriter> metrics_;
  std::optional<EventLog> events_;
  std::optional<StepTrace> trace_;  // with --trace
  Timer run_timer_, since_save_;
  Timer since_step_;  // this rank's time since the last step's gather
  StragglerDetector stragglers_;
  bool stop_requested_ = false;  // some rank got SIGUSR1 (agreed by the gather)
  double bubble_seconds_ = 0, schedule_seconds_ = 0;  // this rank's, over the run
};

}  // namespace ladder
