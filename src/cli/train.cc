// ladder train: trains a model from a config on a text file or prepared token
// shards, writes metrics as it goes and the model directory at the end.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/checkpoint/checkpoint.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/fault_injection.h"
#include "src/cli/model_dir.h"
#include "src/cli/parallel_layout.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/core/trace.h"
#include "src/data/dataset.h"
#include "src/parallel/mpi_comm.h"
#include "src/tokenizer/tokenizer_dir.h"
#include "src/tools/ceiling.h"
#include "src/train/step_trace.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

struct TrainFlags {
  std::string config, data, out, tokenizer, init_from, device = "auto";
  int64_t steps = 0, seed = 0, log_every = 0, eval_every = -1;
  LayoutFlags layout;
  // Checkpoints (src/checkpoint/checkpoint.h).
  std::string checkpoint_dir, resume, inject_fault;
  int64_t save_every = 0, keep = 3;
  double save_every_minutes = 0, spike_z = 0;
  int64_t max_bad_steps = 3;
  bool strict = false, async_save = false;
  // The step timeline (src/train/step_trace.h).
  std::string trace, trace_steps = "2:3";
};

// The tokenizer for a run: an explicit file (or directory holding either
// kind), the one beside prepared shards, plain bytes for a 256 vocabulary,
// or one trained on the text now.
absl::StatusOr<Tokenizer> ResolveTokenizer(const RunConfig& rc) {
  if (!rc.tokenizer.empty()) {
    if (std::filesystem::is_directory(rc.tokenizer)) return LoadTokenizerDir(rc.tokenizer);
    return Tokenizer::Load(rc.tokenizer);
  }
  if (std::filesystem::is_directory(rc.data)) return LoadTokenizerDir(rc.data);
  if (rc.model.vocab_size == 256) return Tokenizer::ByteLevel();
  ASSIGN_OR_RETURN(std::string text, ReadFile(rc.data));
  Timer t;
  ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Train(text, rc.model.vocab_size));
  std::fprintf(stderr, "trained a %d-token BPE tokenizer on %s in %.1fs\n", tok.vocab_size(),
               rc.data.c_str(), t.Seconds());
  return tok;
}

// InvalidArgument naming the first model key where `init` (from --init-from
// `path`) and the config differ.
absl::Status CheckSameShape(const GptConfig& init, const GptConfig& config,
                            const std::string& path) {
  const std::pair<const char*, std::pair<int, int>> keys[] = {
      {"n_layer", {init.n_layer, config.n_layer}},
      {"n_head", {init.n_head, config.n_head}},
      {"n_embd", {init.n_embd, config.n_embd}},
      {"context", {init.context, config.context}},
      {"vocab_size", {init.vocab_size, config.vocab_size}},
  };
  for (const auto& [key, values] : keys) {
    if (values.first != values.second) {
      return absl::InvalidArgumentError(absl::StrCat("--init-from ", path, ": its ", key, " is ",
                                                     values.first, " but the config's is ",
                                                     values.second));
    }
  }
  return absl::OkStatus();
}

// What every rank allocated and passed to its communicators in the first
// step, gathered to rank 0 and written as JSON (docs/formats.md): the
// measurement `ladder plan` is held to.
absl::Status WriteRankReport(const std::string& path, ParallelRun& par, const Trainer& trainer,
                             const Backend& backend, const StepRecord& r) {
  constexpr int kFields = 9;
  const Gpt& m = trainer.model();
  int64_t mine[kFields] = {m.weight_memory_bytes(), trainer.gradient_bytes(),
                           trainer.optimizer_state_bytes(), m.activation_sizes().total_bytes(),
                           backend.bytes_allocated()};
  const Axis axes[] = {Axis::kTensor, Axis::kData, Axis::kPipeline, Axis::kEmbedding};
  for (const StepRecord::AxisComm& c : r.comm) {
    for (int a = 0; a < 4; ++a) {
      if (c.axis == AxisName(axes[a])) mine[5 + a] = c.bytes;
    }
  }
  const int world = par.grid.world_size();
  std::vector<int64_t> all(static_cast<size_t>(world) * kFields);
  // Moved as bytes: the communicators reduce 32-bit types only.
  RETURN_IF_ERROR(par.comms[Axis::kWorld].AllGather(
      Tensor(mine, DType::kI8, {kFields * 8}, Device::kCpu),
      Tensor(all.data(), DType::kI8, {world * kFields * 8}, Device::kCpu)));
  if (par.grid.rank() != 0) return absl::OkStatus();
  const GridShape& g = par.grid.shape();
  std::string json = "[";
  for (int q = 0; q < world; ++q) {
    const int64_t* v = &all[static_cast<size_t>(q) * kFields];
    absl::StrAppendFormat(
        &json,
        "%s\n{\"rank\":%d,\"pp\":%d,\"dp\":%d,\"tp\":%d,\"memory\":{\"weights\":%d,"
        "\"grads\":%d,\"optimizer\":%d,\"activations\":%d,\"allocated\":%d},"
        "\"comm_bytes\":{\"tensor\":%d,\"data\":%d,\"pipeline\":%d,\"embedding\":%d}}",
        q ? "," : "", q, q / (g.dp * g.tp), q / g.tp % g.dp, q % g.tp, v[0], v[1], v[2], v[3], v[4],
        v[5], v[6], v[7], v[8]);
  }
  return WriteFileAtomically(path, json + "\n]\n");
}

// A failed save is reported, not fatal: the previous checkpoint is intact
// and the next save may succeed (a full disk gets room again).
void ReportSave(const absl::StatusOr<std::string>& saved, bool lead) {
  if (!lead) return;
  if (!saved.ok()) {
    std::fprintf(stderr, "warning: %s; the previous checkpoint is still the latest\n",
                 std::string(saved.status().message()).c_str());
  } else if (!saved->empty()) {
    std::fprintf(stderr, "saved %s\n", saved->c_str());
  }
}

absl::Status Train(const TrainFlags& f, const FlagSet& flags) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  if (f.out.empty()) return absl::InvalidArgumentError("missing --out DIR");
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  if (flags.IsSet("data")) rc.data = f.data;
  if (flags.IsSet("tokenizer")) rc.tokenizer = f.tokenizer;
  if (flags.IsSet("steps")) rc.steps = f.steps;
  if (flags.IsSet("seed")) rc.seed = static_cast<uint64_t>(f.seed);
  if (flags.IsSet("log-every")) rc.log_every = f.log_every;
  if (flags.IsSet("eval-every")) rc.eval_every = f.eval_every;
  RETURN_IF_ERROR(rc.Validate());
  RETURN_IF_ERROR(CheckLayout(rc, f.layout, MpiRuntime::world_size()));
  ASSIGN_OR_RETURN(FaultPlan fault, ParseFault(f.inject_fault));
  if (flags.IsSet("trace-steps") && f.trace.empty()) {
    return absl::InvalidArgumentError("--trace-steps needs --trace FILE");
  }
  ASSIGN_OR_RETURN(const StepWindow trace_window, ParseStepWindow(f.trace_steps));
  // Against the whole run now; against the steps left once resumed.
  RETURN_IF_ERROR(FitStepWindow(trace_window, flags.IsSet("trace-steps"), 1, rc.steps).status());
  if (!f.trace.empty()) {
    const std::filesystem::path dir = std::filesystem::path(f.trace).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return absl::NotFoundError(
          absl::StrCat("--trace ", f.trace, ": directory '", dir.string(), "' does not exist"));
    }
  }
  if (f.save_every < 0 || f.keep < 1 || f.save_every_minutes < 0) {
    return absl::InvalidArgumentError(
        "--save-every and --save-every-minutes must be >= 0 and --keep >= 1");
  }
  const std::string checkpoint_dir =
      f.checkpoint_dir.empty() ? f.out + "/checkpoints" : f.checkpoint_dir;
  // An explicit --resume, or the run's own checkpoints from an earlier try.
  const std::string resume_from =
      !f.resume.empty() ? f.resume : (HasCheckpoint(checkpoint_dir) ? checkpoint_dir : "");
  const bool lead = MpiRuntime::world_rank() == 0;
  if (rc.data.empty()) return absl::InvalidArgumentError("no data: pass --data PATH");
  if (!std::filesystem::exists(rc.data)) {
    return absl::NotFoundError(absl::StrCat("data '", rc.data, "' does not exist"));
  }
  // The device before the slow preparations (tokenizer, corpus, ceiling),
  // so an unusable one is refused at once.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));

  // --init-from: a trained or imported model to start from. Its shape must
  // be the config's (nothing is silently reshaped), and its tokenizer is
  // the run's unless one is named.
  std::optional<ModelDir> init;
  if (!f.init_from.empty()) {
    ASSIGN_OR_RETURN(ModelDir loaded, LoadModelDir(f.init_from));
    RETURN_IF_ERROR(CheckSameShape(loaded.model.config, rc.model, f.init_from));
    init.emplace(std::move(loaded));
  }
  ASSIGN_OR_RETURN(Tokenizer tok, init.has_value() && rc.tokenizer.empty()
                                      ? absl::StatusOr<Tokenizer>(init->tokenizer)
                                      : ResolveTokenizer(rc));
  if (tok.vocab_size() != rc.model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", tok.vocab_size(),
                                                   " tokens but the config's vocab_size is ",
                                                   rc.model.vocab_size));
  }
  ASSIGN_OR_RETURN(TokenSplits data, LoadCorpus(rc.data, tok, rc.val_fraction));
  if (lead) {
    std::error_code ec;
    std::filesystem::create_directories(f.out, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create '", f.out, "': ", ec.message()));
  }

  ASSIGN_OR_RETURN(ParallelRun par, SetUpParallelRun(f.layout, *backend));
  const Grid& grid = par.grid;
  TrainerOptions options = par.groups(f.layout);
  ASSIGN_OR_RETURN(options.storage, ParsePrecision(f.layout.precision, *backend));
  ASSIGN_OR_RETURN(const GemmCeiling ceiling,
                   MeasureBackendGemmCeiling(*backend, 1024, 3, options.storage));
  const double peak = ceiling.gflops;
  options.guard.spike_z = f.spike_z;
  options.guard.max_bad_steps = static_cast<int>(f.max_bad_steps);
  options.inject_nan_step = fault.nan_step;
  ASSIGN_OR_RETURN(auto trainer,
                   Trainer::Create(rc, backend.get(), &data.train, &data.val, peak, options));
  Gpt& model = trainer->model();
  CheckpointContext ckpt;
  ckpt.grid = &grid;
  ckpt.world = &par.comms[Axis::kWorld];
  ckpt.zero = static_cast<int>(f.layout.zero);
  ckpt.write_extra = [&tok](const std::string& dir) { return SaveTokenizerDir(tok, dir); };
  if (init.has_value() && resume_from.empty()) {
    // A resumed run continues from its checkpoint instead (it started here).
    RETURN_IF_ERROR(model.SetLogicalWeights(init->model.weights));
    if (lead) std::fprintf(stderr, "initialized from %s\n", f.init_from.c_str());
  }
  if (!resume_from.empty()) {
    ASSIGN_OR_RETURN(std::string loaded, LoadCheckpoint(resume_from, *trainer, ckpt, f.strict));
    if (lead) {
      std::fprintf(stderr, "resumed from %s at step %lld\n", loaded.c_str(),
                   static_cast<long long>(trainer->step()));
    }
  }
  std::optional<StepTrace> trace;
  if (!f.trace.empty()) {
    ASSIGN_OR_RETURN(const StepWindow window, FitStepWindow(trace_window, flags.IsSet("trace-steps"),
                                                            trainer->step() + 1, rc.steps));
    trace.emplace(f.trace, window, grid, backend->timer());
  }
  std::optional<MetricsWriter> metrics;
  if (lead) {
    ASSIGN_OR_RETURN(
        MetricsWriter m,
        MetricsWriter::Open(f.out + "/metrics.jsonl", resume_from.empty() ? -1 : trainer->step()));
    metrics.emplace(std::move(m));
  }
  const double mib = 1.0 / (1 << 20);
  if (lead)
    std::fprintf(stderr,
                 "layout: dp %d x tp %d x pp %d (%d ranks), ZeRO-%d, %d microbatches of %d "
                 "sequences per DP rank, %s schedule\n",
                 grid.dp_size(), grid.tp_size(), grid.pp_size(), grid.world_size(),
                 static_cast<int>(f.layout.zero), trainer->microbatches(), trainer->micro_rows(),
                 f.layout.pp_schedule.c_str());
  if (lead)
    std::fprintf(
        stderr,
        "model: %d layers, %d heads, width %d, context %d, vocab %d (padded %d): %.2fM "
        "parameters\n"
        "data: %zu train / %zu validation tokens; %lld tokens per step (%d x %d x %d "
        "accumulation)\n"
        "memory (rank 0): weights %.1f MiB, grads %.1f MiB, AdamW %.1f MiB, activations %.1f MiB; "
        "backend %s, GEMM ceiling %.1f GFLOP/s\n",
        rc.model.n_layer, rc.model.n_head, rc.model.n_embd, rc.model.context, rc.model.vocab_size,
        rc.model.padded_vocab(), rc.model.NumParameters() / 1e6, data.train.size(), data.val.size(),
        static_cast<long long>(trainer->tokens_per_step()), rc.batch_size, rc.model.context,
        rc.AccumulationSteps(), model.weight_memory_bytes() * mib, model.grads().bytes() * mib,
        trainer->optimizer_state_bytes() * mib, model.activation_sizes().total_bytes() * mib,
        std::string(backend->name()).c_str(), peak);

  Timer run_timer, since_save;
  CheckpointWriter writer;
  const bool saving = f.save_every > 0 || f.save_every_minutes > 0;
  if (trace.has_value()) {
    RETURN_IF_ERROR(trace->AtStep(trainer->step(), par.comms[Axis::kWorld]).status());
  }
  double bubble_seconds = 0, schedule_seconds = 0;  // this rank's, over the run
  RETURN_IF_ERROR(trainer->Run([&](const StepRecord& step_record) -> absl::Status {
    StepRecord r = step_record;
    // An asynchronous save commits once every rank has written its shard.
    if (fault.slow_rank == grid.rank()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fault.slow_ms));
    }
    // A run of bad steps (src/train/guard.h) goes back to the last checkpoint.
    if (trainer->guard().needs_rollback()) {
      if (!HasCheckpoint(checkpoint_dir)) {
        return absl::FailedPreconditionError(absl::StrCat(
            f.max_bad_steps, " consecutive bad steps (non-finite or spiking loss) at step ", r.step,
            " and no checkpoint to roll back to"));
      }
      ReportSave(writer.Finish(), lead);  // a save in flight is the newest one
      ASSIGN_OR_RETURN(std::string back, LoadCheckpoint(checkpoint_dir, *trainer, ckpt, f.strict));
      if (lead) {
        std::fprintf(stderr, "rolled back to %s after %lld consecutive bad steps\n", back.c_str(),
                     static_cast<long long>(f.max_bad_steps));
        // The metrics describe the run as it now stands.
        metrics.reset();
        ASSIGN_OR_RETURN(MetricsWriter m,
                         MetricsWriter::Open(f.out + "/metrics.jsonl", trainer->step()));
        metrics.emplace(std::move(m));
      }
      return absl::OkStatus();  // on every rank: the rolled-back step is not saved or logged
    }
    // An asynchronous save commits once every rank has written its shard.
    ReportSave(writer.Poll(), lead);
    bool due = f.save_every > 0 && r.step % f.save_every == 0;
    if (f.save_every_minutes > 0) {
      // Clocks differ between ranks: one late clock is enough for all.
      int32_t late = since_save.Seconds() >= 60 * f.save_every_minutes ? 1 : 0;
      RETURN_IF_ERROR(ckpt.world->AllReduce(Tensor::I32(&late, {1}, Device::kCpu), ReduceOp::kMax));
      due = due || late != 0;
    }
    if (due || (saving && r.step == rc.steps)) {
      const int64_t save_begin = NowNanos();
      ckpt.crash_before_commit = r.step == fault.crash_save_step;
      ckpt.fail_writes = r.step == fault.enospc_step;
      const bool async = f.async_save && r.step != rc.steps;
      RETURN_IF_ERROR(
          writer.Start(checkpoint_dir, *trainer, ckpt, static_cast<int>(f.keep), async));
      if (!async) ReportSave(writer.Finish(), lead);
      const int64_t save_end = NowNanos();
      r.t_checkpoint = static_cast<double>(save_end - save_begin) * 1e-9;
      // The stall, beside the step it follows.
      if (TraceEvent* e = TraceInterval(TraceTrack::kStep, "checkpoint", "checkpoint",
                                        save_begin, save_end)) {
        e->AddArg("step", r.step);
      }
      since_save.Reset();
      if (lead && async) {
        std::fprintf(stderr,
                     "checkpoint of step %lld: snapshot in %.2fs, written in the background\n",
                     static_cast<long long>(r.step), r.t_checkpoint);
      }
    }
    if (r.step == fault.kill_step && grid.rank() == fault.kill_rank) std::raise(SIGKILL);
    if (trace.has_value()) {
      ASSIGN_OR_RETURN(const bool wrote, trace->AtStep(r.step, par.comms[Axis::kWorld]));
      if (wrote) {
        std::fprintf(stderr, "trace of steps %lld to %lld: %s (open it in https://ui.perfetto.dev "
                     "or chrome://tracing)\n",
                     static_cast<long long>(trace->window().first),
                     static_cast<long long>(trace->window().last), trace->path().c_str());
      }
    }
    if (r.step == 1) {
      RETURN_IF_ERROR(WriteRankReport(f.out + "/ranks.json", par, *trainer, *backend, r));
    }
    bubble_seconds += r.t_bubble;
    schedule_seconds += r.t_forward + r.t_backward + r.t_bubble;
    if (!lead) return absl::OkStatus();
    RETURN_IF_ERROR(metrics->Write(r));
    if (r.step % rc.log_every == 0 || r.step == rc.steps || r.val_loss) {
      const double eta = run_timer.Seconds() / r.step * (rc.steps - r.step);
      std::fprintf(stderr, "%s\n", r.ProgressLine(rc.steps, eta).c_str());
    }
    return absl::OkStatus();
  }));

  if (grid.pp_size() > 1) {
    // Each rank's idle share of its schedule, averaged over the ranks.
    float share = schedule_seconds > 0 ? static_cast<float>(bubble_seconds / schedule_seconds) : 0;
    RETURN_IF_ERROR(
        par.comms[Axis::kWorld].AllReduce(Tensor::F32(&share, {1}, Device::kCpu), ReduceOp::kSum));
    if (lead) {
      std::fprintf(stderr,
                   "pipeline bubble: %.1f%% of the schedule (mean over ranks), textbook "
                   "(P-1)/(M+P-1) = %.1f%%\n",
                   100.0 * share / grid.world_size(),
                   100.0 * pp::TextbookBubble(grid.pp_size(), trainer->microbatches()));
    }
  }
  std::vector<float> weights;
  RETURN_IF_ERROR(model.GetLogicalWeights(&weights));
  if (!lead) return absl::OkStatus();
  RETURN_IF_ERROR(SaveModelDir(f.out, rc.model, weights, tok));
  std::fprintf(stderr, "saved %s/model.bin and its tokenizer (%.0fs)\n", f.out.c_str(),
               run_timer.Seconds());
  return absl::OkStatus();
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  TrainFlags f;
  FlagSet flags(
      "ladder train",
      "Train a GPT on the CPU from a config (configs/*.conf); under mpirun, in parallel.");
  flags.String("config", &f.config, "model and run config file (required)");
  constexpr const char* kConfig = "the config's";
  flags.String("data", &f.data, "text file or prepared shard directory", kConfig);
  flags.String("out", &f.out,
               "output directory: metrics.jsonl, model.bin, the tokenizer (required)");
  flags.String(
      "tokenizer", &f.tokenizer,
      "tokenizer file (ladder's), or a directory holding tokenizer.bpe or vocab.json + merges.txt",
      "the config's, else the shard directory's, bytes for vocab 256, or trained on the data");
  flags.String("init-from", &f.init_from,
               "start from this model's weights (run directory, checkpoint, model file or "
               "`ladder import` output; its shape must be the config's; its tokenizer unless "
               "--tokenizer is given)",
               "GPT-2 initialization");
  flags.Int("steps", &f.steps, "optimizer steps", kConfig);
  flags.Int("seed", &f.seed, "random seed for weights and batches", kConfig);
  flags.Int("log-every", &f.log_every, "steps between progress lines", kConfig);
  flags.Int("eval-every", &f.eval_every, "steps between validation losses, 0 = at the end only",
            kConfig);
  AddLayoutFlags(flags, &f.layout);
  AddDeviceFlag(flags, &f.device);
  AddCommFlags(flags, &f.layout);
  flags.Int("save-every", &f.save_every, "steps between checkpoints (and at the end); 0 = none");
  flags.Double("save-every-minutes", &f.save_every_minutes,
               "minutes between checkpoints (and at the end); 0 = by steps only");
  flags.Bool("async-save", &f.async_save,
             "write checkpoints in a background thread; training stalls only for the snapshot");
  flags.Int("keep", &f.keep, "committed checkpoints to keep");
  flags.String("checkpoint-dir", &f.checkpoint_dir,
               "where checkpoints go; a run whose directory has one resumes from it",
               "OUT/checkpoints");
  flags.String("resume", &f.resume,
               "resume from this checkpoint directory (its latest) or step directory, in any "
               "layout");
  flags.Double("spike-z", &f.spike_z,
               "skip an update whose loss is this many standard deviations above its running "
               "mean (0: off; non-finite losses and norms are always skipped)");
  flags.Int("max-bad-steps", &f.max_bad_steps,
            "consecutive skipped steps before rolling back to the last checkpoint");
  flags.Bool("strict", &f.strict, "refuse a corrupt checkpoint instead of using an earlier one");
  flags.String("inject-fault", &f.inject_fault,
               "kill:RANK@STEP, nan@STEP, crash-during-save@STEP, enospc@STEP or slow:RANK:MS "
               "(src/cli/fault_injection.h), for recovery tests");
  flags.String("trace", &f.trace,
               "write the step timeline of --trace-steps to this file (Chrome trace JSON: open "
               "it in https://ui.perfetto.dev or chrome://tracing)");
  flags.String("trace-steps", &f.trace_steps,
               "A:B, the first and last step --trace records (cut to the run)");
  return RunParallelCommand(flags, argc, argv, [&] { return Train(f, flags); });
}

}  // namespace ladder
