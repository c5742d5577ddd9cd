// The CUDA backends as the factory (src/backend/backend_factory.cc) sees
// them: plain functions, so that the factory, compiled once, can make both
// the GPU backend and the simulated one (each compiled from the same
// cuda_backend.cc against a different runtime).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/parallel/comm.h"

namespace ladder {

// The CUDA backend on the CUDA simulator (every build): kernels/*.cu run on
// the CPU with bounds-checked memory; slow, for tests and CI.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaSimBackend();

#if defined(LADDER_HAVE_CUDA)
// The CUDA backend on GPU `ordinal` (CUDA builds only). Fails with the
// runtime's reason where that GPU is not usable.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int ordinal);

// The NCCL communicator (src/parallel/nccl_comm.h) of `host`'s group for the
// tensors of `backend`, a backend NewCudaBackend made: its collectives run
// on the backend's stream, in order with its ops. Collective over the group.
// InvalidArgument for any other backend; FailedPrecondition where this build
// has no NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(const Backend& backend,
                                                                  Communicator& host,
                                                                  double timeout_seconds);
#endif

}  // namespace ladder
