// <cuda_runtime.h> for code compiled against the CUDA simulator: on the
// include path (before any real CUDA include) of every file compiled with
// -DLADDER_CUDA_SIM, so kernels/*.cu and the CUDA backend's host side compile
// unchanged. It exports the simulator's runtime (runtime.h) and device side
// (device.h) under CUDA's names; the definitions stay in ladder::cuda_sim, so
// they never collide with the real runtime's symbols in one binary.
#pragma once

#if !defined(LADDER_CUDA_SIM)
#error "the simulator's cuda_runtime.h is for -DLADDER_CUDA_SIM compilations only"
#endif

#include "src/backend/cuda_sim/device.h"
#include "src/backend/cuda_sim/runtime.h"

using namespace ladder::cuda_sim;  // NOLINT: this header stands in for CUDA's global API
