// A CUDA build whose toolkit has no NCCL: the GPU backend runs, but its
// tensors cannot cross between ranks.
#include "src/parallel/nccl_comm.h"

namespace ladder {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Communicator&, cudaStream_t,
                                                                     double) {
  return absl::FailedPreconditionError(
      "this build has no NCCL: a run of several ranks on GPUs needs a toolkit with NCCL");
}

}  // namespace ladder
