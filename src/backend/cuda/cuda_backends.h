// The CUDA backends as the factory (src/backend/backend_factory.cc) sees
// them: plain functions, so that the factory, compiled once, can make both
// the GPU backend and the simulated one (each compiled from the same
// cuda_backend.cc against a different runtime).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"

namespace ladder {

// The CUDA backend on the CUDA simulator (every build): kernels/*.cu run on
// the CPU with bounds-checked memory; slow, for tests and CI.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaSimBackend();

#if defined(LADDER_HAVE_CUDA)
// The CUDA backend on GPU 0 (CUDA builds only). Fails with the runtime's
// reason where no GPU is usable.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend();
#endif

}  // namespace ladder
