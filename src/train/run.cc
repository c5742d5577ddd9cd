#include "src/train/run.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/core/trace.h"
#include "src/parallel/nodes.h"
#include "src/parallel/pipeline_parallel/schedule.h"
#include "src/report/report.h"
#include "src/train/gpu_telemetry.h"

namespace ladder {
namespace {

// Set by SIGUSR1: the supervisor asks the run to checkpoint and stop, to
// restart it on more ranks.
volatile std::sig_atomic_t g_stop_requested = 0;
void OnStopRequest(int) { g_stop_requested = 1; }

// What every rank allocated and passed to its communicators in the first
// step, gathered to rank 0 and written as JSON (docs/formats.md): the
// measurement `ladder plan` is held to.
absl::Status WriteRankReport(const std::string& path, const RunParts& parts, const StepRecord& r) {
  constexpr int kFields = 13;
  const Trainer& trainer = *parts.trainer;
  const Gpt& m = trainer.model();
  std::vector<int64_t> mine = {m.weight_memory_bytes(), trainer.gradient_bytes(),
                               trainer.optimizer_state_bytes(), m.activation_sizes().total_bytes(),
                               parts.backend->bytes_allocated()};
  mine.resize(kFields, 0);  // then the bytes per axis, then the offload's
  mine[10] = trainer.host_offload_bytes();
  mine[11] = r.link.to_host;
  mine[12] = r.link.to_device;
  const Axis axes[] = {Axis::kTensor, Axis::kData, Axis::kPipeline, Axis::kEmbedding,
                       Axis::kContext};
  for (const StepRecord::AxisComm& c : r.comm) {
    for (int a = 0; a < 5; ++a) {
      if (c.axis == AxisName(axes[a])) mine[5 + a] = c.bytes;
    }
  }
  const int world = parts.grid->world_size();
  ASSIGN_OR_RETURN(const std::vector<int64_t> all, AllGatherValues(*parts.world, std::move(mine)));
  if (parts.grid->rank() != 0) return absl::OkStatus();
  std::string json = "[";
  for (int q = 0; q < world; ++q) {
    const int64_t* v = &all[static_cast<size_t>(q) * kFields];
    ASSIGN_OR_RETURN(const Grid at, Grid::Create(parts.grid->shape(), world, q));
    absl::StrAppendFormat(
        &json,
        "%s\n{\"rank\":%d,\"pp\":%d,\"dp\":%d,\"cp\":%d,\"tp\":%d,\"memory\":{"
        "\"weights\":%d,\"grads\":%d,\"optimizer\":%d,\"activations\":%d,\"allocated\":%d,"
        "\"host\":%d},"
        "\"comm_bytes\":{\"tensor\":%d,\"data\":%d,\"pipeline\":%d,\"embedding\":%d,"
        "\"context\":%d},\"link_bytes\":{\"to_host\":%d,\"to_device\":%d}}",
        q ? "," : "", q, at.pp_rank(), at.dp_rank(), at.cp_rank(), at.tp_rank(), v[0], v[1], v[2],
        v[3], v[4], v[10], v[5], v[6], v[7], v[8], v[9], v[11], v[12]);
  }
  return WriteFileAtomically(path, json + "\n]\n");
}

}  // namespace

absl::Status RunPolicy::Validate() const {
  if (out.empty()) return absl::InvalidArgumentError("missing --out DIR");
  if (save_every < 0 || keep < 1 || save_every_minutes < 0 || mem_save_every < 0) {
    return absl::InvalidArgumentError(
        "--save-every, --save-every-minutes and --mem-save-every must be >= 0 and --keep >= 1");
  }
  if (!trace.empty()) {
    const std::filesystem::path dir = std::filesystem::path(trace).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return absl::NotFoundError(
          absl::StrCat("--trace ", trace, ": directory '", dir.string(), "' does not exist"));
    }
  }
  if (straggler_action != "warn" && straggler_action != "restart-without") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--straggler-action must be warn or restart-without, got '", straggler_action, "'"));
  }
  return straggler.Validate();
}

TrainingRun::TrainingRun(RunPolicy policy, RunParts parts)
    : policy_(std::move(policy)), parts_(std::move(parts)), stragglers_(policy_.straggler) {
  if (policy_.checkpoint_dir.empty()) policy_.checkpoint_dir = policy_.out + "/checkpoints";
  // An explicit --resume, or the run's own checkpoints from an earlier try.
  resume_from_ = !policy_.resume.empty()                 ? policy_.resume
                 : HasCheckpoint(policy_.checkpoint_dir) ? policy_.checkpoint_dir
                                                         : "";
  ckpt_.grid = parts_.grid;
  ckpt_.world = parts_.world;
  ckpt_.zero = policy_.zero;
  ckpt_.write_extra = parts_.write_extra;
  ckpt_.env = parts_.env;
}

absl::Status TrainingRun::Run() {
  Trainer& trainer = *parts_.trainer;
  if (policy_.mem_save_every > 0) {
    ASSIGN_OR_RETURN(MemoryCheckpointer m,
                     MemoryCheckpointer::Create(policy_.checkpoint_dir, ckpt_));
    memory_.emplace(std::move(m));
  }
  if (lead()) {
    ASSIGN_OR_RETURN(EventLog log, EventLog::Open(policy_.out + "/events.jsonl"));
    events_.emplace(std::move(log));
  }
  const GridShape& g = parts_.grid->shape();
  RETURN_IF_ERROR(Event(trainer.step(), "start",
                        absl::StrFormat("%s, %d steps", LayoutName(g), trainer.config().steps)));
  const int64_t fresh_step = trainer.step();
  RETURN_IF_ERROR(Restore());
  RETURN_IF_ERROR(OpenMetrics(trainer.step() == fresh_step && !resuming()));
  // GPU utilization, memory and power beside the metrics, where NVML exists.
  std::unique_ptr<GpuTelemetry> telemetry;
  if (lead()) {
    ASSIGN_OR_RETURN(telemetry, GpuTelemetry::Start(policy_.out, kTelemetryPeriodMs));
  }
  if (!policy_.trace.empty()) {
    // The window within the steps left (a resumed run has taken some).
    ASSIGN_OR_RETURN(const StepWindow window,
                     FitStepWindow(policy_.trace_steps, policy_.trace_steps_explicit,
                                   trainer.step() + 1, trainer.config().steps));
    trace_.emplace(policy_.trace, window, *parts_.grid, parts_.backend->timer());
    RETURN_IF_ERROR(TraceAt(trainer.step()));
  }
  run_timer_.Reset();
  since_save_.Reset();
  since_step_.Reset();
  // SIGUSR1 (mpirun passes it to every rank) asks for a checkpoint and a
  // stop; at other times it keeps its default action.
  g_stop_requested = 0;
  const auto previous = std::signal(SIGUSR1, OnStopRequest);
  absl::Status trained = trainer.Run([this](const StepRecord& r) { return OnStep(r); });
  std::signal(SIGUSR1, previous);
  RETURN_IF_ERROR(trained);
  Report(writer_.Finish());
  if (memory_.has_value()) memory_->Remove();
  RETURN_IF_ERROR(SummarizeBubble());
  telemetry.reset();
  RETURN_IF_ERROR(Event(trainer.step(), "end", absl::StrFormat("%.0fs", run_timer_.Seconds())));
  return WriteReport();
}

absl::Status TrainingRun::TraceAt(int64_t steps_done) {
  if (!trace_.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const bool wrote, trace_->AtStep(steps_done, *parts_.world));
  if (wrote) {
    std::fprintf(stderr,
                 "trace of steps %lld to %lld: %s (open it in https://ui.perfetto.dev or "
                 "chrome://tracing)\n",
                 static_cast<long long>(trace_->window().first),
                 static_cast<long long>(trace_->window().last), trace_->path().c_str());
  }
  return absl::OkStatus();
}

// The run's report (src/report/report.h) from what it wrote. A report that
// fails is a warning: the training it describes succeeded.
absl::Status TrainingRun::WriteReport() {
  if (!lead()) return absl::OkStatus();
  std::vector<std::string> warnings;
  absl::StatusOr<std::string> page = WriteRunReport(policy_.out, "", &warnings);
  if (!page.ok()) {
    std::fprintf(stderr, "warning: no report: %s\n", std::string(page.status().message()).c_str());
  } else {
    std::fprintf(stderr, "report: %s\n", page->c_str());
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::Restore() {
  Trainer& trainer = *parts_.trainer;
  ASSIGN_OR_RETURN(bool restored, RestoreFromMemory());
  if (!restored && resuming()) {
    ASSIGN_OR_RETURN(std::string loaded,
                     LoadCheckpoint(resume_from_, trainer, ckpt_, policy_.strict));
    RETURN_IF_ERROR(Resumed(loaded));
    restored = true;
  }
  return restored ? trainer.ForgetOnResume(policy_.resume_forget) : absl::OkStatus();
}

absl::Status TrainingRun::Resumed(const std::string& from) {
  const int64_t step = parts_.trainer->step();
  if (lead()) {
    std::fprintf(stderr, "resumed from %s at step %lld\n", from.c_str(),
                 static_cast<long long>(step));
  }
  return Event(step, "restore", from);
}

absl::StatusOr<bool> TrainingRun::RestoreFromMemory() {
  // An explicit --resume names the checkpoint to start from.
  if (!memory_.has_value() || !policy_.resume.empty()) return false;
  Trainer& trainer = *parts_.trainer;
  const int64_t disk_step = LatestCheckpointStep(policy_.checkpoint_dir).value_or(-1);
  absl::StatusOr<std::string> from = memory_->Restore(trainer, disk_step);
  if (!from.ok()) {
    if (lead()) {
      std::fprintf(stderr, "not restoring from memory: %s; %s\n",
                   std::string(from.status().message()).c_str(),
                   resuming() ? "restoring from disk" : "starting afresh");
    }
    return false;
  }
  RETURN_IF_ERROR(Resumed(*from));
  return true;
}

absl::Status TrainingRun::OnStep(StepRecord r) {
  Trainer& trainer = *parts_.trainer;
  const int rank = parts_.grid->rank();
  // Gathered before AfterStep: a rank that is slow there makes the others
  // wait in the next step's collectives, where their waits are counted, and
  // its own delay counts in its next step's compute time.
  RETURN_IF_ERROR(GatherRankSeconds(&r));
  since_step_.Reset();
  parts_.env->AfterStep(rank, r.step);
  if (stop_requested_) {
    RETURN_IF_ERROR(SaveNowAndLog(r));
    return absl::CancelledError(absl::StrFormat(
        "stopped at step %d on request (SIGUSR1) to be restarted in a new layout", r.step));
  }
  if (trainer.guard().needs_rollback()) return RollBack(r.step);
  ASSIGN_OR_RETURN(const bool due, SaveDue(r.step));
  if (due) {
    RETURN_IF_ERROR(Save(&r));
  } else if (memory_.has_value() && r.step % policy_.mem_save_every == 0) {
    RETURN_IF_ERROR(SaveToMemory(&r));
  }
  // The window ends after the step's checkpoint stall, which belongs to it.
  RETURN_IF_ERROR(TraceAt(r.step));
  if (r.step == 1) RETURN_IF_ERROR(WriteRankReport(policy_.out + "/ranks.json", parts_, r));
  bubble_seconds_ += r.t_bubble;
  schedule_seconds_ += r.t_forward + r.t_backward + r.t_bubble;
  RETURN_IF_ERROR(Log(r));
  // Checkpoints commit only after the step's metrics line, so a resumed run
  // never lacks the line of the step it resumes from. A synchronous save
  // commits now, an asynchronous one once every rank has written its shard.
  Report(writer_.Poll());
  RETURN_IF_ERROR(CommitToMemory(r.step));
  parts_.env->StepDone(rank, r.step);
  return absl::OkStatus();
}

absl::Status TrainingRun::GatherRankSeconds(StepRecord* r) {
  const int world = parts_.grid->world_size();
  // A stop request (SIGUSR1) travels with the times, so every rank stops
  // after the same step even if the signal reached only some.
  const double asked = g_stop_requested ? 1 : 0;
  if (world == 1) {
    stop_requested_ = asked != 0;
    return absl::OkStatus();
  }
  // Waiting is time inside collectives; the pipeline's hand-overs wait
  // inside the bubble, so that axis counts the larger of the two.
  double waiting = 0, pipeline = 0;
  for (const StepRecord::AxisComm& c : r->comm) {
    if (c.axis == AxisName(Axis::kPipeline)) {
      pipeline = c.seconds;
    } else {
      waiting += c.seconds;
    }
  }
  waiting += std::max(pipeline, r->t_bubble);
  const double wall = since_step_.Seconds();
  constexpr int kFields = 3;
  ASSIGN_OR_RETURN(
      const std::vector<double> all,
      AllGatherValues<double>(*parts_.world, {std::max(0.0, wall - waiting), wall, asked}));
  double step_seconds = 0;
  r->rank_seconds.resize(world);
  for (int q = 0; q < world; ++q) {
    r->rank_seconds[q] = all[kFields * q];
    step_seconds = std::max(step_seconds, all[kFields * q + 1]);
    stop_requested_ = stop_requested_ || all[kFields * q + 2] != 0;
  }
  const StragglerDetector::Verdict v = stragglers_.Observe(r->rank_seconds, step_seconds);
  r->straggler = v.straggler;
  if (!v.episode_start) return absl::OkStatus();
  const std::string what = v.straggler->Describe();
  if (lead()) {
    std::fprintf(stderr, "straggler at step %lld: %s\n", static_cast<long long>(r->step),
                 what.c_str());
  }
  RETURN_IF_ERROR(Event(r->step, "straggler", what));
  if (policy_.straggler_action == "restart-without") return LeaveOut(r);
  return absl::OkStatus();
}

absl::Status TrainingRun::LeaveOut(StepRecord* r) {
  ASSIGN_OR_RETURN(const NodeMap nodes, NodeMapFromEnv(parts_.grid->world_size()));
  const int rank = r->straggler->rank, node = nodes.node(rank), per_node = nodes.ranks_per_node;
  RETURN_IF_ERROR(SaveNowAndLog(*r));
  if (lead()) {
    RETURN_IF_ERROR(WriteFileAtomically(
        policy_.out + "/leave_out.json",
        absl::StrFormat("{\"step\":%d,\"rank\":%d,\"node\":%d,\"ranks_per_node\":%d}\n", r->step,
                        rank, node, per_node)));
  }
  return absl::CancelledError(absl::StrFormat(
      "straggler %s; stopped at step %d to be restarted without node %d (%s/leave_out.json)",
      r->straggler->Describe(), r->step, node, policy_.out));
}

absl::Status TrainingRun::SaveNowAndLog(const StepRecord& r) {
  // The restarted job resumes here: the newest checkpoint is this step's.
  Report(writer_.Finish());
  RETURN_IF_ERROR(writer_.Start(policy_.checkpoint_dir, *parts_.trainer, ckpt_, policy_.keep,
                                /*async=*/false));
  RETURN_IF_ERROR(Log(r));
  const absl::StatusOr<std::string> saved = writer_.Finish();
  Report(saved);
  return saved.status();
}

absl::Status TrainingRun::RollBack(int64_t step) {
  Trainer& trainer = *parts_.trainer;
  if (!HasCheckpoint(policy_.checkpoint_dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat(trainer.guard().state().consecutive_bad,
                     " consecutive bad steps (non-finite or spiking loss) at step ", step,
                     " and no checkpoint to roll back to"));
  }
  const int bad = trainer.guard().state().consecutive_bad;
  Report(writer_.Finish());  // a save in flight is the newest one
  ASSIGN_OR_RETURN(std::string back,
                   LoadCheckpoint(policy_.checkpoint_dir, trainer, ckpt_, policy_.strict));
  // Memory checkpoints newer than `back` hold the abandoned steps.
  if (memory_.has_value()) memory_->Remove();
  if (lead()) {
    std::fprintf(stderr, "rolled back to %s after %d consecutive bad steps\n", back.c_str(), bad);
  }
  RETURN_IF_ERROR(Event(trainer.step(), "rollback",
                        absl::StrCat(bad, " bad steps at step ", step, "; back to ", back)));
  // The metrics describe the run as it now stands. On every rank: the
  // rolled-back step is neither saved nor logged.
  return OpenMetrics(false);
}

absl::StatusOr<bool> TrainingRun::SaveDue(int64_t step) {
  const bool saving = policy_.save_every > 0 || policy_.save_every_minutes > 0;
  if (!saving) return false;
  bool due = step == parts_.trainer->config().steps ||
             (policy_.save_every > 0 && step % policy_.save_every == 0);
  if (policy_.save_every_minutes > 0) {
    // Clocks differ between ranks: one late clock is enough for all.
    int32_t late = since_save_.Seconds() >= 60 * policy_.save_every_minutes ? 1 : 0;
    RETURN_IF_ERROR(parts_.world->AllReduce(Tensor::I32(&late, {1}, Device::kCpu), ReduceOp::kMax));
    due = due || late != 0;
  }
  return due;
}

absl::Status TrainingRun::Save(StepRecord* r) {
  const int64_t begin = NowNanos();
  // The last checkpoint is written at once: the run ends with it.
  const bool async = policy_.async_save && r->step != parts_.trainer->config().steps;
  RETURN_IF_ERROR(
      writer_.Start(policy_.checkpoint_dir, *parts_.trainer, ckpt_, policy_.keep, async));
  const int64_t end = NowNanos();
  r->t_checkpoint = static_cast<double>(end - begin) * 1e-9;
  // The stall, beside the step it follows.
  if (TraceEvent* e = TraceInterval(TraceTrack::kStep, "checkpoint", "checkpoint", begin, end)) {
    e->AddArg("step", r->step);
  }
  since_save_.Reset();
  if (lead() && async) {
    std::fprintf(stderr, "checkpoint of step %lld: snapshot in %.2fs, written in the background\n",
                 static_cast<long long>(r->step), r->t_checkpoint);
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::SaveToMemory(StepRecord* r) {
  const int64_t begin = NowNanos();
  absl::StatusOr<std::string> saved = memory_->Save(*parts_.trainer);
  const int64_t end = NowNanos();
  const double seconds = static_cast<double>(end - begin) * 1e-9;
  r->t_checkpoint += seconds;
  if (TraceEvent* e =
          TraceInterval(TraceTrack::kStep, "checkpoint", "memory checkpoint", begin, end)) {
    e->AddArg("step", r->step);
  }
  if (!saved.ok()) return MemoryFailed(r->step, saved.status());
  mem_written_ = absl::StrFormat("%s, %.3fs", *saved, seconds);
  return absl::OkStatus();
}

absl::Status TrainingRun::CommitToMemory(int64_t step) {
  if (mem_written_.empty()) return absl::OkStatus();
  const std::string written = std::exchange(mem_written_, std::string());
  const absl::Status committed = memory_->Commit();
  if (!committed.ok()) return MemoryFailed(step, committed);
  return lead() ? Event(step, "mem_save", written) : absl::OkStatus();
}

absl::Status TrainingRun::MemoryFailed(int64_t step, const absl::Status& why) {
  if (!lead()) return absl::OkStatus();
  const std::string message(why.message());
  std::fprintf(stderr, "warning: memory checkpoint of step %lld failed: %s\n",
               static_cast<long long>(step), message.c_str());
  return Event(step, "mem_save", absl::StrCat("failed: ", message));
}

// A failed save is reported, not fatal: the previous checkpoint is intact
// and the next save may succeed (a full disk gets room again).
void TrainingRun::Report(const absl::StatusOr<std::string>& saved) {
  if (!lead()) return;
  const int64_t step = parts_.trainer->step();
  absl::Status logged = absl::OkStatus();
  if (!saved.ok()) {
    const std::string message(saved.status().message());
    std::fprintf(stderr, "warning: %s; the previous checkpoint is still the latest\n",
                 message.c_str());
    logged = Event(step, "save", absl::StrCat("failed: ", message));
  } else if (!saved->empty()) {
    std::fprintf(stderr, "saved %s\n", saved->c_str());
    logged = Event(step, "save", *saved);
  }
  if (!logged.ok()) {
    std::fprintf(stderr, "warning: %s\n", std::string(logged.message()).c_str());
  }
}

absl::Status TrainingRun::Log(const StepRecord& r) {
  if (!lead()) return absl::OkStatus();
  RETURN_IF_ERROR(metrics_->Write(r));
  const RunConfig& rc = parts_.trainer->config();
  if (r.step % rc.log_every == 0 || r.step == rc.steps || r.val_loss) {
    const double eta = run_timer_.Seconds() / r.step * (rc.steps - r.step);
    std::fprintf(stderr, "%s\n", r.ProgressLine(rc.steps, eta).c_str());
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::Event(int64_t step, const std::string& kind, const std::string& detail) {
  if (!events_.has_value()) return absl::OkStatus();
  return events_->Append(step, kind, detail);
}

absl::Status TrainingRun::OpenMetrics(bool fresh) {
  if (!lead()) return absl::OkStatus();
  metrics_.reset();
  ASSIGN_OR_RETURN(MetricsWriter m, MetricsWriter::Open(policy_.out + "/metrics.jsonl",
                                                        fresh ? -1 : parts_.trainer->step()));
  metrics_.emplace(std::move(m));
  return absl::OkStatus();
}

absl::Status TrainingRun::SummarizeBubble() {
  const Grid& grid = *parts_.grid;
  if (grid.pp_size() <= 1) return absl::OkStatus();
  // Each rank's idle share of its schedule, averaged over the ranks.
  float share = schedule_seconds_ > 0 ? static_cast<float>(bubble_seconds_ / schedule_seconds_) : 0;
  RETURN_IF_ERROR(parts_.world->AllReduce(Tensor::F32(&share, {1}, Device::kCpu), ReduceOp::kSum));
  if (lead()) {
    std::fprintf(stderr,
                 "pipeline bubble: %.1f%% of the schedule (mean over ranks), textbook "
                 "(P-1)/(M+P-1) = %.1f%%\n",
                 100.0 * share / grid.world_size(),
                 100.0 * pp::TextbookBubble(grid.pp_size(), parts_.trainer->microbatches()));
  }
  return absl::OkStatus();
}

}  // namespace ladder
