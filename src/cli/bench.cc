// ladder bench train: training throughput as a fraction of this machine's
// GEMM rate, both measured in the same process. Weights and tokens are random
// (the speed of a step does not depend on what the tokens say).
#include <omp.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/backend/cpu/blas_kernels.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/parallel_layout.h"
#include "src/core/flags.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/parallel/mpi_comm.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

struct BenchFlags {
  std::string config, device = "auto";
  int64_t steps = 5, warmup = 1, batch_size = 0;
  LayoutFlags layout;
};

// Per-rank figures gathered to rank 0, seconds per step: the whole step, its
// communication on the tensor, data and embedding axes, and the pipeline
// bubble (the schedule's time outside forward and backward); the rest is
// compute. Last, the schedule's wall time (forward, backward and bubble).
constexpr int kRankFields = 7;

absl::Status BenchTrain(const BenchFlags& f, const FlagSet& flags) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  if (f.steps <= 0 || f.warmup < 0) {
    return absl::InvalidArgumentError("--steps must be positive and --warmup >= 0");
  }
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  if (flags.IsSet("batch-size")) rc.batch_size = static_cast<int>(f.batch_size);
  rc.total_batch_tokens = 0;  // one micro-batch per step: time what one step costs
  // With CUDA graphs a pass runs eagerly once, then is recorded: one more
  // untimed step, so the timed ones only replay.
  const int64_t warmup = f.warmup + (f.layout.cuda_graph ? 1 : 0);
  rc.steps = f.steps + warmup;
  RETURN_IF_ERROR(rc.Validate());
  RETURN_IF_ERROR(CheckLayout(rc, f.layout, MpiRuntime::world_size()));
  const bool lead = MpiRuntime::world_rank() == 0;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));

  // Random tokens: enough windows for every step without wrapping.
  const int64_t n = (rc.steps + 1) * rc.batch_size * (rc.model.context + 1) + 1;
  std::vector<int32_t> tokens(n);
  PhiloxStream rng(rc.seed, kSyntheticDataStream);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.NextU32() % rc.model.vocab_size);

  ASSIGN_OR_RETURN(ParallelRun par, SetUpParallelRun(f.layout, *backend));
  ASSIGN_OR_RETURN(const DType storage, ParsePrecision(f.layout.precision, *backend));
  ASSIGN_OR_RETURN(const JobGemmCeiling ceiling, par.MeasureGemmCeiling(*backend, 2048, storage));
  double gemm = ceiling.gflops;
  TrainerOptions options = par.groups(f.layout);
  options.storage = storage;
  ASSIGN_OR_RETURN(auto trainer,
                   Trainer::Create(rc, backend.get(), &tokens, &tokens, gemm, options));
  if (lead) {
    std::printf(
        "bench train: %s, %.2fM parameters, %d x %d tokens per step, %d threads per "
        "rank, dp %d x tp %d x pp %d, ZeRO-%d, %d microbatches (%s), %s\n",
        f.config.c_str(), rc.model.NumParameters() / 1e6, rc.batch_size, rc.model.context,
        omp_get_max_threads(), par.grid.dp_size(), par.grid.tp_size(), par.grid.pp_size(),
        static_cast<int>(f.layout.zero), trainer->microbatches(), f.layout.pp_schedule.c_str(),
        storage == DType::kBF16 ? "bf16 mixed precision" : "fp32");
    std::printf("kernels: %s; ladder's own: %s\n", BlasSummary().c_str(),
                CpuIsaName(ActiveCpuIsa()));
    std::printf("GEMM ceiling: %.1f GFLOP/s (best: %s)%s\n", gemm, ceiling.source.c_str(),
                ceiling.Spread().c_str());
  }
  for (int64_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(trainer->Step().status());
  StepRecord sum;
  float mine[kRankFields] = {};
  for (int64_t i = 0; i < f.steps; ++i) {
    ASSIGN_OR_RETURN(StepRecord r, trainer->Step());
    sum.t_step += r.t_step;
    sum.t_data += r.t_data;
    sum.t_forward += r.t_forward;
    sum.t_backward += r.t_backward;
    sum.t_optimizer += r.t_optimizer;
    mine[5] += static_cast<float>((r.t_forward + r.t_backward + r.t_bubble) / f.steps);
    mine[0] += static_cast<float>(r.t_step / f.steps);
    mine[4] += static_cast<float>(r.t_bubble / f.steps);
    for (const StepRecord::AxisComm& c : r.comm) {
      const int field = c.axis == AxisName(Axis::kTensor)      ? 1
                        : c.axis == AxisName(Axis::kData)      ? 2
                        : c.axis == AxisName(Axis::kEmbedding) ? 3
                        : c.axis == AxisName(Axis::kContext)   ? 6
                                                               : -1;  // pipeline: the bubble
      if (field > 0) mine[field] += static_cast<float>(c.seconds / f.steps);
    }
  }
  const int world = par.grid.world_size();
  if (world > 1) {
    std::vector<float> all(static_cast<size_t>(world) * kRankFields);
    RETURN_IF_ERROR(par.comms[Axis::kWorld].AllGather(
        Tensor::F32(mine, {kRankFields}, Device::kCpu),
        Tensor::F32(all.data(), {world * kRankFields}, Device::kCpu)));
    if (lead) {
      std::printf(
          "rank  (pp,dp,cp,tp)  step ms  compute ms  tensor comm ms  context comm ms  data comm ms"
          "  embed comm ms  bubble ms\n");
      for (int q = 0; q < world; ++q) {
        const float* v = &all[static_cast<size_t>(q) * kRankFields];
        ASSIGN_OR_RETURN(const Grid at, Grid::Create(par.grid.shape(), world, q));
        std::printf("%4d  (%d,%d,%d,%d)    %7.1f  %10.1f  %14.1f  %15.1f  %12.1f  %13.1f  %9.1f\n",
                    q, at.pp_rank(), at.dp_rank(), at.cp_rank(), at.tp_rank(), 1e3 * v[0],
                    1e3 * (v[0] - v[1] - v[2] - v[3] - v[4] - v[6]), 1e3 * v[1], 1e3 * v[6],
                    1e3 * v[2], 1e3 * v[3], 1e3 * v[4]);
      }
    }
    if (lead && par.grid.pp_size() > 1) {
      double bubble = 0;
      for (int q = 0; q < world; ++q) {
        const float* v = &all[static_cast<size_t>(q) * kRankFields];
        bubble += v[5] > 0 ? v[4] / v[5] / world : 0.0;
      }
      std::printf(
          "pipeline bubble: %.1f%% of the schedule (mean over ranks), textbook (P-1)/(M+P-1) "
          "= %.1f%% (P = %d, M = %d)\n",
          100 * bubble, 100 * pp::TextbookBubble(par.grid.pp_size(), trainer->microbatches()),
          par.grid.pp_size(), trainer->microbatches());
    }
  }
  if (!lead) return absl::OkStatus();
  const double tokens_per_s =
      static_cast<double>(trainer->tokens_per_step()) * f.steps / sum.t_step;
  const double gflops = tokens_per_s * rc.model.TrainingFlopsPerToken() / 1e9;
  // The trainer raises the ceiling to any step that outran it (trainer.h),
  // so the fraction, as MFU, stays at most 1.
  if (trainer->peak_gflops() > gemm) {
    gemm = trainer->peak_gflops();
    std::printf("a step outran the GEMM ceiling measured at start: ceiling raised to %.1f\n", gemm);
  }
  if (f.layout.cuda_graph) {
    const Gpt::GraphCounts graphs = trainer->model().graph_counts();
    std::printf("cuda graphs (rank 0): %lld recorded, %lld passes replayed\n",
                static_cast<long long>(graphs.captures), static_cast<long long>(graphs.replays));
  }
  std::printf("step %.1f ms: forward %.0f%%, backward %.0f%%, optimizer %.0f%%, data %.0f%%\n",
              1e3 * sum.t_step / f.steps, 100 * sum.t_forward / sum.t_step,
              100 * sum.t_backward / sum.t_step, 100 * sum.t_optimizer / sum.t_step,
              100 * sum.t_data / sum.t_step);
  std::printf("%.0f tokens/s, %.1f GFLOP/s = %.1f%% of the GEMM ceiling\n", tokens_per_s, gflops,
              100 * gflops / gemm);
  std::printf("{\"tokens_per_s\":%.1f,\"gflops\":%.2f,\"gemm_gflops\":%.2f,\"fraction\":%.4f}\n",
              tokens_per_s, gflops, gemm, gflops / gemm);
  return absl::OkStatus();
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "checkpoint") {
    return BenchCheckpointCommand(argc - 1, argv + 1);
  }
  if (argc >= 1 && std::string(argv[0]) == "decode") {
    return BenchDecodeCommand(argc - 1, argv + 1);
  }
  if (argc >= 1 && std::string(argv[0]) == "matmul") {
    return BenchMatmulCommand(argc - 1, argv + 1);
  }
  if (argc >= 1 && std::string(argv[0]) == "ops") {
    return BenchOpsCommand(argc - 1, argv + 1);
  }
  if (argc >= 1 && std::string(argv[0]) == "serve") {
    return BenchServeCommand(argc - 1, argv + 1);
  }
  if (argc < 1 || std::string(argv[0]) != "train") {
    if (argc >= 1 && (std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h")) {
      std::printf(
          "usage: ladder bench train|checkpoint|decode|matmul|ops|serve [flags]   (each has "
          "--help)\n");
      return 0;
    }
    std::fprintf(stderr,
                 "ladder bench: expected 'train', 'checkpoint', 'decode', 'matmul', 'ops' or "
                 "'serve'%s\n",
                 argc >= 1 ? absl::StrCat(", got '", argv[0], "'").c_str() : "");
    return 2;
  }
  BenchFlags f;
  FlagSet flags("ladder bench train",
                "Training tokens/s and GFLOP/s as a fraction of the best GEMM rate (BLAS or "
                "ladder's own kernel) measured in the same run. The last line is JSON.");
  flags.String("config", &f.config, "model config to time (required)");
  flags.Int("steps", &f.steps, "timed steps");
  flags.Int("warmup", &f.warmup,
            "untimed steps first (with --cuda-graph one more, the step that records)");
  flags.Int("batch-size", &f.batch_size, "sequences per step", "the config's batch_size");
  AddLayoutFlags(flags, &f.layout);
  AddDeviceFlag(flags, &f.device);
  AddCommFlags(flags, &f.layout);
  return RunParallelCommand(flags, argc - 1, argv + 1, [&] { return BenchTrain(f, flags); });
}

}  // namespace ladder
