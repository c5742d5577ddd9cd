#include "src/cli/parallel_layout.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {

void AddLayoutFlags(FlagSet& flags, LayoutFlags* f) {
  flags.Int("dp", &f->dp, "data-parallel degree (under mpirun; dp x tp = ranks)");
  flags.Int("tp", &f->tp,
            "tensor-parallel degree (Megatron style; divides n_head and the vocabulary)");
  flags.Int("zero", &f->zero, "1: ZeRO-1, shard the AdamW state over the data-parallel ranks");
  flags.Double("comm-timeout", &f->comm_timeout,
               "seconds a collective may wait before the job is aborted, naming the op and peer");
}

absl::Status CheckLayout(const RunConfig& rc, const LayoutFlags& f) {
  if (f.dp < 1 || f.tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp and --tp must be at least 1, got ", f.dp, " and ", f.tp));
  }
  if (f.dp * f.tp != MpiRuntime::world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("dp x tp = ", f.dp, " x ", f.tp, " = ",
                                                   f.dp * f.tp, " but the job has ",
                                                   MpiRuntime::world_size(), " ranks"));
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
  if (rc.batch_size % f.dp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size (", rc.batch_size, ") is not divisible by dp (", f.dp, ")"));
  }
  if (f.zero != 0 && f.zero != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--zero must be 0 or 1, got ", f.zero));
  }
  if (!(f.comm_timeout > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--comm-timeout must be positive, got ", f.comm_timeout));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParallelRun> SetUpParallelRun(const LayoutFlags& f) {
  // The rank grid [pp][dp][tp], TP innermost, and one communicator per axis.
  ASSIGN_OR_RETURN(Grid grid, Grid::Create({static_cast<int>(f.dp), static_cast<int>(f.tp), 1},
                                           MpiRuntime::world_size(), MpiRuntime::world_rank()));
  ASSIGN_OR_RETURN(Communicators comms, CreateHostCommunicators(grid, f.comm_timeout));
  return ParallelRun{grid, std::move(comms)};
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
