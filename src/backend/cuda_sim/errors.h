// The simulator's error state, as CUDA keeps it: a last error per host thread
// (returned and cleared by cudaGetLastError) and a sticky error for faults
// inside kernels, which every later call returns until cudaDeviceReset.
// Internal to the simulator.
#pragma once

#include <string>

#include "src/backend/cuda_sim/runtime.h"

namespace ladder {
namespace cuda_sim {
namespace internal {

// Records err (not cudaSuccess) with its full message and returns it. With
// sticky = true every later call fails with it too.
cudaError_t Fail(cudaError_t err, std::string detail, bool sticky = false);
// The sticky error, or cudaSuccess.
cudaError_t StickyError();
// Clears the sticky error (cudaDeviceReset).
void ClearErrors();

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
