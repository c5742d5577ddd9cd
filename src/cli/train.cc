// ladder train: trains a model from a config on a text file or prepared token
// shards, writes metrics as it goes and the model directory at the end.
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/checkpoint/checkpoint.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/model_dir.h"
#include "src/cli/parallel_layout.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/data/dataset.h"
#include "src/parallel/mpi_comm.h"
#include "src/tokenizer/tokenizer_dir.h"
#include "src/tools/plan.h"
#include "src/train/fault_env.h"
#include "src/train/run.h"
#include "src/train/step_trace.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

// `train`'s exit status when the run stopped itself to be restarted in
// another layout (src/train/run.h: --straggler-action restart-without, or
// SIGUSR1): 75, sysexits.h's EX_TEMPFAIL ("try again"), apart from the 1
// and 2 of failures. scripts/train_resilient.sh restarts the job, without
// the node named in OUT/leave_out.json if there is one.
constexpr int kExitRestart = 75;

struct TrainFlags {
  std::string config, data, out, tokenizer, init_from, device = "auto";
  int64_t steps = 0, seed = 0, log_every = 0, eval_every = -1;
  LayoutFlags layout;
  // Checkpoints and recovery (src/train/run.h).
  RunPolicy policy;
  int64_t keep = 3;
  std::string inject_fault;
  double spike_z = 0;
  int64_t max_bad_steps = 3;
  int64_t straggler_window = 5;
  std::string trace_steps = "2:3";  // --trace-steps (src/train/step_trace.h)
  double max_rank_memory_mib = 0;   // --max-rank-memory (src/tools/plan.h CheckRankMemory)
  double peak_gflops = 0;           // --peak-gflops; 0: measured (JobGemmCeiling)
  bool prefetch = false;
  int64_t local_sgd = 0;
  std::string resume_forget = "nothing";
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

absl::Status Train(const TrainFlags& f, const FlagSet& flags) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  if (flags.IsSet("data")) rc.data = f.data;
  if (flags.IsSet("tokenizer")) rc.tokenizer = f.tokenizer;
  if (flags.IsSet("steps")) rc.steps = f.steps;
  if (flags.IsSet("seed")) rc.seed = static_cast<uint64_t>(f.seed);
  if (flags.IsSet("log-every")) rc.log_every = f.log_every;
  if (flags.IsSet("eval-every")) rc.eval_every = f.eval_every;
  RETURN_IF_ERROR(rc.Validate());
  RETURN_IF_ERROR(CheckLayout(rc, f.layout, MpiRuntime::world_size()));
  ASSIGN_OR_RETURN(std::unique_ptr<FaultEnv> env, FaultEnv::Parse(f.inject_fault));
  RunPolicy policy = f.policy;
  policy.keep = static_cast<int>(f.keep);
  policy.zero = static_cast<int>(f.layout.zero);
  policy.straggler.window = static_cast<int>(f.straggler_window);
  if (f.local_sgd < 0) return absl::InvalidArgumentError("--local-sgd must be >= 0");
  if (!(f.peak_gflops >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peak-gflops must be >= 0 (GFLOP/s per rank; 0 measures the ceiling), got ",
                     f.peak_gflops));
  }
  if (f.local_sgd > 1 &&
      (policy.save_every > 0 || policy.save_every_minutes > 0 || policy.mem_save_every > 0)) {
    return absl::InvalidArgumentError(
        "--local-sgd does not checkpoint: its replicas' weights and moments differ between "
        "averages, and a checkpoint holds one replica's");
  }
  if (f.resume_forget == "data") {
    policy.resume_forget = Trainer::Forget::kData;
  } else if (f.resume_forget == "rng") {
    policy.resume_forget = Trainer::Forget::kRng;
  } else if (f.resume_forget != "nothing") {
    return absl::InvalidArgumentError(
        absl::StrCat("--resume-forget must be nothing, data or rng, got '", f.resume_forget, "'"));
  }
  if (flags.IsSet("trace-steps") && policy.trace.empty()) {
    return absl::InvalidArgumentError("--trace-steps needs --trace FILE");
  }
  ASSIGN_OR_RETURN(policy.trace_steps, ParseStepWindow(f.trace_steps));
  policy.trace_steps_explicit = flags.IsSet("trace-steps");
  // Against the whole run now; against the steps left once it has resumed.
  RETURN_IF_ERROR(
      FitStepWindow(policy.trace_steps, policy.trace_steps_explicit, 1, rc.steps).status());
  RETURN_IF_ERROR(policy.Validate());
  if (f.spike_z < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spike-z must be >= 0 (0: off), got ", f.spike_z));
  }
  if (f.max_bad_steps < 1 || f.max_bad_steps > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("--max-bad-steps must be in [1, ",
                                                   std::numeric_limits<int>::max(), "], got ",
                                                   f.max_bad_steps));
  }
  RETURN_IF_ERROR(CheckRankMemoryFlag(f.max_rank_memory_mib));
  const bool lead = MpiRuntime::world_rank() == 0;
  if (rc.data.empty()) return absl::InvalidArgumentError("no data: pass --data PATH");
  if (!std::filesystem::exists(rc.data)) {
    return absl::NotFoundError(absl::StrCat("data '", rc.data, "' does not exist"));
  }
  // The device before the slow preparations (tokenizer, corpus, ceiling),
  // so an unusable one is refused at once.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  if (f.max_rank_memory_mib > 0) {
    // What each rank will hold, predicted as `ladder plan` does, before any
    // of it is allocated.
    ASSIGN_OR_RETURN(const DType storage, ParsePrecision(f.layout.precision, *backend));
    ASSIGN_OR_RETURN(const PlanLayout layout, ToPlanLayout(f.layout, storage));
    ASSIGN_OR_RETURN(const Plan plan, MakePlan(rc, layout));
    RETURN_IF_ERROR(CheckRankMemory(plan, f.max_rank_memory_mib));
  }

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
  // Removed again if the run is refused before it writes anything there.
  MadeDirs out_dir;
  if (lead) RETURN_IF_ERROR(out_dir.Create(f.policy.out));

  ASSIGN_OR_RETURN(ParallelRun par, SetUpParallelRun(f.layout, *backend));
  const Grid& grid = par.grid;
  TrainerOptions options = par.groups(f.layout);
  ASSIGN_OR_RETURN(options.storage, ParsePrecision(f.layout.precision, *backend));
  ASSIGN_OR_RETURN(const JobGemmCeiling ceiling,
                   f.peak_gflops > 0 ? par.StatedGemmCeiling(f.peak_gflops)
                                     : par.MeasureGemmCeiling(*backend, 1024, options.storage));
  const double peak = ceiling.gflops;
  options.guard.spike_z = f.spike_z;
  options.guard.max_bad_steps = static_cast<int>(f.max_bad_steps);
  options.env = env.get();
  options.prefetch = f.prefetch;
  options.local_sgd = static_cast<int>(f.local_sgd);
  ASSIGN_OR_RETURN(auto trainer,
                   Trainer::Create(rc, backend.get(), &data.train, &data.val, peak, options));
  Gpt& model = trainer->model();
  RunParts parts;
  parts.trainer = trainer.get();
  parts.backend = backend.get();
  parts.grid = &grid;
  parts.world = &par.comms[Axis::kWorld];
  parts.env = env.get();
  parts.write_extra = [&tok](const std::string& dir) { return SaveTokenizerDir(tok, dir); };
  TrainingRun run(policy, std::move(parts));
  if (init.has_value() && !run.resuming()) {
    // A resumed run continues from its checkpoint instead (it started here).
    RETURN_IF_ERROR(model.SetLogicalWeights(init->model.weights));
    if (lead) std::fprintf(stderr, "initialized from %s\n", f.init_from.c_str());
  }
  const double mib = 1.0 / (1 << 20);
  if (lead)
    std::fprintf(stderr,
                 "layout: %s (%d ranks), ZeRO-%d, %d microbatches of %d "
                 "sequences per DP rank, %s schedule\n",
                 LayoutName(grid.shape()).c_str(), grid.world_size(),
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
        "backend %s, GEMM ceiling %.1f GFLOP/s%s\n",
        rc.model.n_layer, rc.model.n_head, rc.model.n_embd, rc.model.context, rc.model.vocab_size,
        rc.model.padded_vocab(), rc.model.NumParameters() / 1e6, data.train.size(), data.val.size(),
        static_cast<long long>(trainer->tokens_per_step()), rc.batch_size, rc.model.context,
        rc.AccumulationSteps(), model.weight_memory_bytes() * mib, model.grads().bytes() * mib,
        trainer->optimizer_state_bytes() * mib, model.activation_sizes().total_bytes() * mib,
        std::string(backend->name()).c_str(), peak, ceiling.Spread().c_str());

  Timer run_timer;
  RETURN_IF_ERROR(run.Run());
  if (lead && f.layout.cuda_graph) {
    const Gpt::GraphCounts graphs = model.graph_counts();
    std::fprintf(stderr, "cuda graphs (rank 0): %lld recorded, %lld passes replayed\n",
                 static_cast<long long>(graphs.captures), static_cast<long long>(graphs.replays));
  }
  std::vector<float> weights;
  RETURN_IF_ERROR(model.GetLogicalWeights(&weights));
  if (!lead) return absl::OkStatus();
  RETURN_IF_ERROR(SaveModelDir(f.policy.out, rc.model, weights, tok));
  std::fprintf(stderr, "saved %s/model.bin and its tokenizer (%.0fs)\n", f.policy.out.c_str(),
               run_timer.Seconds());
  return absl::OkStatus();
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  TrainFlags f;
  FlagSet flags("ladder train",
                "Train a GPT from a config (configs/*.conf); under mpirun, in parallel.");
  flags.String("config", &f.config, "model and run config file (required)");
  constexpr const char* kConfig = "the config's";
  flags.String("data", &f.data, "text file or prepared shard directory", kConfig);
  flags.String("out", &f.policy.out,
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
  flags.Int("local-sgd", &f.local_sgd,
            "H > 1: data-parallel replicas apply their own gradients and average their weights "
            "every H steps (local SGD, src/train/trainer.h); 0 or 1: synchronous steps");
  flags.Double("peak-gflops", &f.peak_gflops,
               "each rank's peak GEMM rate in GFLOP/s, which MFU divides by (e.g. a datasheet's "
               "dense bf16 figure per GPU); the job's is the sum over ranks",
               "the GEMM ceiling, measured on every rank at start-up");
  flags.Bool("prefetch", &f.prefetch,
             "read the next batch on a loading thread while the step computes (the same batches)");
  AddLayoutFlags(flags, &f.layout);
  AddDeviceFlag(flags, &f.device);
  AddCommFlags(flags, &f.layout);
  AddRankMemoryFlag(flags, &f.max_rank_memory_mib);
  flags.Int("save-every", &f.policy.save_every,
            "steps between checkpoints (and at the end); 0 = none");
  flags.Double("save-every-minutes", &f.policy.save_every_minutes,
               "minutes between checkpoints (and at the end); 0 = by steps only");
  flags.Bool("async-save", &f.policy.async_save,
             "write checkpoints in a background thread; training stalls only for the snapshot");
  flags.Int("mem-save-every", &f.policy.mem_save_every,
            "steps between in-memory checkpoints (node shared memory plus a copy on the next "
            "node, src/checkpoint/memory_checkpoint.h); a rerun restores from them when newer "
            "than the disk's; 0 = none");
  flags.Int("keep", &f.keep, "committed checkpoints to keep");
  flags.String("checkpoint-dir", &f.policy.checkpoint_dir,
               "where checkpoints go; a run whose directory has one resumes from it",
               "OUT/checkpoints");
  flags.String("resume", &f.policy.resume,
               "resume from this checkpoint directory (its latest) or step directory, in any "
               "layout");
  flags.String("resume-forget", &f.resume_forget,
               "what a resume deliberately does not restore, to show why it must: data (the "
               "batches start again at the beginning) or rng (the batch order is drawn anew); "
               "nothing restores everything");
  flags.Double("spike-z", &f.spike_z,
               "skip an update whose loss is this many standard deviations above its running "
               "mean (0: off; non-finite losses and norms are always skipped)");
  flags.Int("max-bad-steps", &f.max_bad_steps,
            "consecutive skipped steps before rolling back to the last checkpoint");
  flags.Bool("strict", &f.policy.strict,
             "refuse a corrupt checkpoint instead of using an earlier one");
  flags.String("inject-fault", &f.inject_fault,
               "kill:RANK@STEP, kill-node:NODE@STEP, nan@STEP, crash-during-save@STEP, "
               "crash-after-save@STEP, enospc@STEP, slow:RANK:MS or slow-data:MS "
               "(src/train/fault_env.h), for recovery tests and experiments");
  flags.Int("straggler-window", &f.straggler_window,
            "steps over which each rank's compute time is averaged to find a straggler");
  flags.Double("straggler-factor", &f.policy.straggler.factor,
               "a rank whose mean compute time exceeds the median rank's by this factor is named "
               "a straggler");
  flags.String("straggler-action", &f.policy.straggler_action,
               "warn: name the straggler (progress line, metrics, events); restart-without: also "
               "checkpoint and exit 75 for the supervisor to restart without its node");
  flags.String("trace", &f.policy.trace,
               "write the step timeline of --trace-steps to this file (Chrome trace JSON: open "
               "it in https://ui.perfetto.dev or chrome://tracing)");
  flags.String("trace-steps", &f.trace_steps,
               "A:B, the first and last step --trace records (cut to the run)");
  absl::Status status;
  const int code = RunParallelCommand(flags, argc, argv, [&] {
    status = Train(f, flags);
    return status;
  });
  return absl::IsCancelled(status) ? kExitRestart : code;
}

}  // namespace ladder
