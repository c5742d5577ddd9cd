// The parallel layout of a `ladder` command run under mpirun: its flags, the
// rules every rank checks before any work, and the grid with one
// communicator per axis. Shared by `train` and `bench train`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/core/flags.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"
#include "src/tools/ceiling.h"
#include "src/tools/plan.h"
#include "src/train/run_config.h"
#include "src/train/trainer.h"

namespace ladder {

struct LayoutFlags {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, zero = 0;
  bool sp = false;           // sequence parallelism inside the tensor-parallel group
  int64_t microbatches = 0;  // 0: the config's accumulation steps
  std::string pp_schedule = "1f1b";
  double bucket_mb = 25;
  bool overlap_grad_reduce = false;  // --overlap-grad-reduce
  bool overlap_p2p = false;          // --overlap-p2p-comm
  bool cuda_graph = false;           // --cuda-graph
  std::string recompute = "none";
  std::string offload = "none";
  double comm_timeout = 300;
  std::string precision = "auto";
  std::string slow_link;  // --slow-link (src/parallel/slow_link.h); "": none
};

// The layout: --dp --tp --sp --cp --pp --microbatches --pp-schedule --zero
// --recompute --offload.
void AddLayoutFlags(FlagSet& flags, LayoutFlags* f);
// What a run adds: --bucket-mb --overlap-grad-reduce --overlap-p2p-comm
// --cuda-graph --comm-timeout --precision --slow-link.
void AddCommFlags(FlagSet& flags, LayoutFlags* f);

// The storage dtype of a run's activations (GptParallel::storage) from
// --precision: "auto" is bf16 on a GPU (the cuda backend) and fp32 elsewhere
// (the CPU, and the simulator, whose bf16 must be asked for); "fp32"; "bf16"
// (a device backend only: cuda or cuda-sim). InvalidArgument otherwise.
absl::StatusOr<DType> ParsePrecision(const std::string& precision, const Backend& backend);

// Every layout rule (dp x cp x tp x pp = ranks, divisibility of heads,
// vocabulary and batch, the context into 2 cp chunks, --sp's tokens over
// tp, layers per stage, the schedule's name), checked identically on
// every rank, so a bad layout gives the same one-line error (printed by rank
// 0) and exit code 2 on all of them. `world_size`: the job's ranks.
absl::Status CheckLayout(const RunConfig& rc, const LayoutFlags& f, int world_size);

// The plan's view of a layout that passed CheckLayout, with activations
// stored as `storage`.
absl::StatusOr<PlanLayout> ToPlanLayout(const LayoutFlags& f, DType storage);
// --max-rank-memory MIB (0: no cap), for train and plan; the flag's value
// is checked (>= 0, InvalidArgument otherwise) by CheckRankMemoryFlag.
void AddRankMemoryFlag(FlagSet& flags, double* mib);
absl::Status CheckRankMemoryFlag(double mib);

// The layout a job that asked for `want` runs on when only `world` ranks
// are left (or come back), as the elastic supervisor needs it
// (scripts/train_resilient.sh, through `ladder plan --largest-layout`):
// data-parallel replicas go first, tp and pp stay while tp x pp fits, then
// pp shrinks before tp. The first layout in that order that passes
// CheckLayout is returned: dp at most want.dp (a job grows back to its own
// layout, never beyond), dp x tp x pp <= world (spare ranks stay idle).
// The global batch is the config's in every layout; each DP rank takes
// global / dp sequences in microbatches of the size `want` had where that
// divides (so activation memory stays the same), else in the wanted count
// of microbatches. --sp stays on while tp > 1; the other fields are want's.
// InvalidArgument when no
// layout fits, naming the world and the wanted layout.
absl::StatusOr<LayoutFlags> LargestLayout(const RunConfig& rc, const LayoutFlags& want, int world);

// The rate a job's MFU divides by: every rank measures its own GEMM ceiling
// (MeasureBackendGemmCeiling, tools/ceiling.h) at the same moment, after a
// barrier, and the rates are summed, so it is what all ranks reach together
// (on the cores they share, or one device each), as the job's FLOP rate is.
// Or every rank's rate is stated (train --peak-gflops, e.g. a datasheet's)
// and the job's is that times the ranks, with nothing measured.
struct JobGemmCeiling {
  double gflops = 0;    // the sum over the ranks
  double rank_min = 0;  // the slowest rank's own
  double rank_max = 0;  // the fastest rank's own
  int ranks = 1;
  bool stated = false;  // given by --peak-gflops, not measured
  std::string source;   // this rank's best candidate, e.g. "BLAS sgemm 1024^3"
  // What the figure is, after it on the run's first lines:
  // " (summed over 4 ranks running at once, 81.2 to 86.0 each)", "" for one
  // measured rank, " (stated by --peak-gflops: 100.0 per rank x 4 ranks)".
  std::string Spread() const;
};

struct ParallelRun {
  Grid grid;
  Communicators comms;
  // The trainer's groups for this rank, as the flags set them.
  TrainerOptions groups(const LayoutFlags& f);
  // The GEMM ceiling of the whole job (JobGemmCeiling). Collective over the
  // world; errors are the backend's or the communicator's.
  absl::StatusOr<JobGemmCeiling> MeasureGemmCeiling(Backend& backend, int max_n, DType storage);
  // The same from a stated rate per rank (> 0); no communication.
  JobGemmCeiling StatedGemmCeiling(double per_rank_gflops);
};
// Builds the grid and the communicators (collective over all ranks). On the
// CPU, MPI carries every buffer. With a device backend each group of two or
// more is a RoutedCommunicator: host buffers over MPI, the backend's tensors
// over MakeDeviceCommunicator's carrier (NCCL on a GPU). The groups of
// the axes --slow-link names wait as if over that link; a malformed
// --slow-link is InvalidArgument before any communicator is made.
absl::StatusOr<ParallelRun> SetUpParallelRun(const LayoutFlags& f, const Backend& backend);

// Runs a command body under MPI when launched by mpirun: initializes MPI,
// runs RunCommand with only rank 0 speaking, finalizes.
int RunParallelCommand(FlagSet& flags, int argc, char** argv,
                       const std::function<absl::Status()>& body);

}  // namespace ladder
