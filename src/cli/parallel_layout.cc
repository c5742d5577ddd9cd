#include "src/cli/parallel_layout.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/core/status.h"
#include "src/parallel/mpi_comm.h"
#include "src/parallel/routed_comm.h"
#include "src/parallel/slow_link.h"

namespace ladder {

void AddLayoutFlags(FlagSet& flags, LayoutFlags* f) {
  flags.Int("dp", &f->dp, "data-parallel degree (under mpirun; dp x tp x pp = ranks)");
  flags.Int("tp", &f->tp,
            "tensor-parallel degree (Megatron style; divides n_head and the vocabulary)");
  flags.Bool("sp", &f->sp,
             "sequence parallelism (with --tp > 1): LayerNorms and the residual stream keep 1/tp "
             "of each microbatch's tokens; reduce-scatter and all-gather replace all-reduce");
  flags.Int("cp", &f->cp,
            "context-parallel degree: each sequence's tokens split over cp ranks (an early and a "
            "late chunk each), attention as a ring; 2 cp divides the context");
  flags.Int("pp", &f->pp, "pipeline-parallel degree: stages of contiguous layers (<= n_layer)");
  flags.Int("microbatches", &f->microbatches,
            "microbatches per step and DP rank (they split the global batch)",
            "the config's accumulation steps");
  flags.String("pp-schedule", &f->pp_schedule, "pipeline schedule: gpipe or 1f1b");
  flags.Int("zero", &f->zero, "1: ZeRO-1, shard the AdamW state over the data-parallel ranks");
  flags.String("recompute", &f->recompute,
               "activation recomputation: none, gelu (rebuild each layer's GELU output in the "
               "backward) or layer (keep each layer's input only, redo the layer's forward)");
  flags.String("offload", &f->offload,
               "none; optimizer: AdamW's moments and the fp32 master weights in host memory, the "
               "update on the host (ZeRO-Offload); params: also the weights and gradients, each "
               "layer brought to the device when it runs (cuda or cuda-sim)");
}

void AddCommFlags(FlagSet& flags, LayoutFlags* f) {
  flags.Double("bucket-mb", &f->bucket_mb, "data-parallel all-reduce bucket size, MiB");
  flags.Bool("overlap-grad-reduce", &f->overlap_grad_reduce,
             "start each bucket's all-reduce as soon as the backward has finished it, so it "
             "travels while the backward goes on (not with --zero 1, --sp, --local-sgd, --offload "
             "params)");
  flags.Bool("overlap-p2p-comm", &f->overlap_p2p,
             "pipeline stages start their sends and post the next gradient's receive early, so "
             "the transfers travel while the stage computes (the same results bit for bit)");
  flags.Bool("cuda-graph", &f->cuda_graph,
             "record each microbatch's forward and backward as a CUDA graph once and replay it, "
             "one launch instead of one per kernel (the same results bit for bit; cuda or "
             "cuda-sim, not with --tp, --cp or --offload params)");
  flags.Double("comm-timeout", &f->comm_timeout,
               "seconds a collective may wait before the job is aborted, naming the op and peer");
  flags.String("precision", &f->precision,
               "auto (bf16 on a GPU, else fp32), fp32, or bf16: mixed precision (bf16 activations "
               "and weight copy, fp32 master weights, gradients and AdamW; cuda or cuda-sim)");
  flags.String("slow-link", &f->slow_link,
               "AXES:US:GBPS: the groups of these axes (tensor, data, pipeline, context, "
               "embedding; comma-separated) wait as if every call crossed a link of this latency "
               "(microseconds) and bandwidth (GB/s), as between nodes (src/parallel/slow_link.h)");
}

namespace {

absl::Status PrecisionError(const std::string& precision) {
  return absl::InvalidArgumentError(
      absl::StrCat("--precision must be auto, fp32 or bf16, got '", precision, "'"));
}

}  // namespace

absl::StatusOr<DType> ParsePrecision(const std::string& precision, const Backend& backend) {
  if (precision == "auto") return backend.name() == "cuda" ? DType::kBF16 : DType::kF32;
  if (precision == "fp32") return DType::kF32;
  if (precision == "bf16") {
    if (backend.device() == Device::kCpu) {
      return absl::InvalidArgumentError(
          "--precision bf16 needs --device cuda or cuda-sim: the CPU backend computes in fp32");
    }
    return DType::kBF16;
  }
  return PrecisionError(precision);
}

absl::Status CheckLayout(const RunConfig& rc, const LayoutFlags& f, int world_size) {
  if (f.dp < 1 || f.tp < 1 || f.pp < 1 || f.cp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp, --tp, --pp and --cp must be at least 1, got ", f.dp, ", ", f.tp, ", ",
                     f.pp, " and ", f.cp));
  }
  if (f.dp * f.cp * f.tp * f.pp != world_size) {
    return absl::InvalidArgumentError(
        f.cp > 1 ? absl::StrCat("dp x cp x tp x pp = ", f.dp, " x ", f.cp, " x ", f.tp, " x ", f.pp,
                                " = ", f.dp * f.cp * f.tp * f.pp, " but the job has ", world_size,
                                " ranks")
                 : absl::StrCat("dp x tp x pp = ", f.dp, " x ", f.tp, " x ", f.pp, " = ",
                                f.dp * f.tp * f.pp, " but the job has ", world_size, " ranks"));
  }
  RETURN_IF_ERROR(ParseOffload(f.offload).status());
  if (rc.model.context % (2 * f.cp) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cp ", f.cp, " cuts each sequence into 2 x cp = ", 2 * f.cp,
                     " chunks, which does not divide the context (", rc.model.context, ")"));
  }
  if (rc.model.n_head % f.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_head (", rc.model.n_head, ") is not divisible by tp (", f.tp, ")"));
  }
  if (rc.model.padded_vocab() % f.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the padded vocabulary (",
                                                   rc.model.padded_vocab(),
                                                   ") is not divisible by tp (", f.tp, ")"));
  }
  if (rc.model.n_layer < f.pp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_layer (", rc.model.n_layer, ") is smaller than pp (", f.pp, "): a stage needs a layer"));
  }
  if (f.microbatches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--microbatches must be positive, got ", f.microbatches));
  }
  const int64_t global = int64_t{rc.batch_size} * rc.AccumulationSteps();
  const int64_t micro = f.microbatches > 0 ? f.microbatches : rc.AccumulationSteps();
  if (global % (f.dp * micro) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the global batch of ", global,
                                                   " sequences does not split into dp (", f.dp,
                                                   ") x microbatches (", micro, ") equal parts"));
  }
  if (f.sp) {
    if (f.tp < 2) {
      return absl::InvalidArgumentError(
          "--sp needs --tp 2 or more: sequence parallelism splits the tokens of the "
          "tensor-parallel group");
    }
    // Every batch shape the trainer runs: a microbatch, and validation's
    // short last chunk.
    const int64_t rows = global / (f.dp * micro);
    const int64_t windows = int64_t{rc.eval_batches} * rc.batch_size;
    for (int64_t b : {rows, windows % rows}) {
      const int64_t tokens = rc.model.context / f.cp;  // a rank's share of a sequence
      if (b * tokens % f.tp != 0) {
        return absl::InvalidArgumentError(absl::StrCat("--sp splits ", b, " sequences x ", tokens,
                                                       " tokens over tp (", f.tp,
                                                       "), which does not divide them"));
      }
    }
  }
  RETURN_IF_ERROR(pp::ParseSchedule(f.pp_schedule).status());
  RETURN_IF_ERROR(ParseRecompute(f.recompute).status());
  if (f.precision != "auto" && f.precision != "fp32" && f.precision != "bf16") {
    return PrecisionError(f.precision);
  }
  if (f.zero != 0 && f.zero != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--zero must be 0 or 1, got ", f.zero));
  }
  if (!(f.bucket_mb > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bucket-mb must be positive, got ", f.bucket_mb));
  }
  if (!(f.comm_timeout > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--comm-timeout must be positive, got ", f.comm_timeout));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanLayout> ToPlanLayout(const LayoutFlags& f, DType storage) {
  PlanLayout l;
  l.dp = static_cast<int>(f.dp);
  l.tp = static_cast<int>(f.tp);
  l.pp = static_cast<int>(f.pp);
  l.sp = f.sp;
  l.cp = static_cast<int>(f.cp);
  l.zero1 = f.zero == 1;
  l.microbatches = static_cast<int>(f.microbatches);
  ASSIGN_OR_RETURN(l.schedule, pp::ParseSchedule(f.pp_schedule));
  ASSIGN_OR_RETURN(l.recompute, ParseRecompute(f.recompute));
  ASSIGN_OR_RETURN(l.offload, ParseOffload(f.offload));
  l.storage = storage;
  return l;
}

void AddRankMemoryFlag(FlagSet& flags, double* mib) {
  flags.Double("max-rank-memory", mib,
               "MiB a rank may hold (weights, gradients, optimizer, activations, as ladder plan "
               "predicts them): a layout predicted to need more is refused before it starts; 0: "
               "no cap");
}

absl::Status CheckRankMemoryFlag(double mib) {
  if (mib >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--max-rank-memory must be >= 0 (0: no cap), got ", mib));
}

absl::StatusOr<LayoutFlags> LargestLayout(const RunConfig& rc, const LayoutFlags& want, int world) {
  const int64_t global = int64_t{rc.batch_size} * rc.AccumulationSteps();
  const int64_t micro = want.microbatches > 0 ? want.microbatches : rc.AccumulationSteps();
  // The wanted microbatch size, in sequences (0 when the wanted layout does
  // not split the batch evenly: then only the count is kept).
  const int64_t rows = global % (want.dp * micro) == 0 ? global / (want.dp * micro) : 0;
  // (tp, cp, pp): the wanted one first, then smaller pipelines, then
  // smaller rings, then smaller tensor groups.
  for (int64_t tp = want.tp; tp >= 1; --tp) {
    for (int64_t cp = want.cp; cp >= 1; --cp) {
      for (int64_t pp = want.pp; pp >= 1; --pp) {
        for (int64_t dp = std::min<int64_t>(want.dp, world / (tp * cp * pp)); dp >= 1; --dp) {
          LayoutFlags l = want;
          l.dp = dp;
          l.tp = tp;
          l.cp = cp;
          l.pp = pp;
          l.sp = want.sp && tp > 1;  // a layout without a tensor group has no sequence to split
          l.microbatches = rows > 0 && global % (dp * rows) == 0 ? global / (dp * rows) : micro;
          if (CheckLayout(rc, l, static_cast<int>(dp * cp * tp * pp)).ok()) return l;
        }
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("no layout of dp x tp x pp at most dp ", want.dp,
                                                 " x tp ", want.tp, " x pp ", want.pp, " fits ",
                                                 world, " rank(s) and the config"));
}

TrainerOptions ParallelRun::groups(const LayoutFlags& f) {
  TrainerOptions g;
  g.tp = &comms[Axis::kTensor];
  g.dp = &comms[Axis::kData];
  g.cp = &comms[Axis::kContext];
  g.pp = &comms[Axis::kPipeline];
  g.embedding = &comms[Axis::kEmbedding];
  g.zero1 = f.zero == 1;
  g.schedule = pp::ParseSchedule(f.pp_schedule).value_or(pp::Schedule::k1F1B);
  g.microbatches = static_cast<int>(f.microbatches);
  g.recompute = ParseRecompute(f.recompute).value_or(Recompute::kNone);
  g.sequence_parallel = f.sp;
  g.offload = ParseOffload(f.offload).value_or(Offload::kNone);
  g.bucket_floats = std::max<int64_t>(1, static_cast<int64_t>(f.bucket_mb * (1 << 20) / 4));
  g.overlap_grad_reduce = f.overlap_grad_reduce;
  g.overlap_p2p = f.overlap_p2p;
  g.cuda_graph = f.cuda_graph;
  return g;
}

absl::StatusOr<ParallelRun> SetUpParallelRun(const LayoutFlags& f, const Backend& backend) {
  // The rank grid [pp][dp][cp][tp], TP innermost, and one communicator per
  // axis.
  ASSIGN_OR_RETURN(const SlowLink slow, ParseSlowLink(f.slow_link));
  GridShape shape{static_cast<int>(f.dp), static_cast<int>(f.tp), static_cast<int>(f.pp),
                  static_cast<int>(f.cp)};
  ASSIGN_OR_RETURN(Grid grid,
                   Grid::Create(shape, MpiRuntime::world_size(), MpiRuntime::world_rank()));
  ASSIGN_OR_RETURN(Communicators comms, CreateHostCommunicators(grid, f.comm_timeout));
  if (backend.device() != Device::kCpu) {
    // A device backend's groups of two or more carry two kinds of buffers:
    // its tensors (NCCL on a GPU; MPI over the simulator's host memory) and
    // host values (MPI). A group of one copies nothing and stays as it is.
    for (std::unique_ptr<Communicator>& host : comms.by_axis) {
      if (host->size() == 1) continue;
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> device,
                       MakeDeviceCommunicator(backend, *host, f.comm_timeout));
      host = std::make_unique<RoutedCommunicator>(std::move(host), std::move(device));
    }
  }
  for (std::unique_ptr<Communicator>& c : comms.by_axis) {
    if (c->size() > 1 && slow.Crosses(c->axis())) {
      c = std::make_unique<SlowLinkCommunicator>(std::move(c), slow);
    }
  }
  return ParallelRun{grid, std::move(comms)};
}

std::string JobGemmCeiling::Spread() const {
  if (stated) {
    return ranks == 1 ? " (stated by --peak-gflops)"
                      : absl::StrFormat(" (stated by --peak-gflops: %.1f per rank x %d ranks)",
                                        rank_max, ranks);
  }
  if (ranks == 1) return "";
  return absl::StrFormat(" (summed over %d ranks running at once, %.1f to %.1f each)", ranks,
                         rank_min, rank_max);
}

absl::StatusOr<JobGemmCeiling> ParallelRun::MeasureGemmCeiling(Backend& backend, int max_n,
                                                               DType storage) {
  Communicator& world = comms[Axis::kWorld];
  RETURN_IF_ERROR(world.Barrier());
  ASSIGN_OR_RETURN(const GemmCeiling mine, MeasureBackendGemmCeiling(backend, max_n, 3, storage));
  ASSIGN_OR_RETURN(const std::vector<double> all, AllGatherValues<double>(world, {mine.gflops}));
  JobGemmCeiling job;
  job.ranks = static_cast<int>(all.size());
  job.rank_min = *std::min_element(all.begin(), all.end());
  job.rank_max = *std::max_element(all.begin(), all.end());
  for (const double g : all) job.gflops += g;  // in rank order: the same sum on every rank
  job.source = mine.source;
  return job;
}

JobGemmCeiling ParallelRun::StatedGemmCeiling(double per_rank_gflops) {
  JobGemmCeiling job;
  job.ranks = comms[Axis::kWorld].size();
  job.rank_min = job.rank_max = per_rank_gflops;
  job.gflops = per_rank_gflops * job.ranks;
  job.stated = true;
  job.source = "--peak-gflops";
  return job;
}

int RunParallelCommand(FlagSet& flags, int argc, char** argv,
                       const std::function<absl::Status()>& body) {
  absl::Status mpi = MpiRuntime::Init(&argc, &argv);
  if (!mpi.ok()) {
    std::fprintf(stderr, "%s: %s\n", flags.command().c_str(), std::string(mpi.message()).c_str());
    return 1;
  }
  const int code = RunCommand(flags, argc, argv, body, MpiRuntime::world_rank() == 0);
  MpiRuntime::Finalize();
  return code;
}

}  // namespace ladder
