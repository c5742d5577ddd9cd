// Launchers of kernels/memory.cu (the memory helpers of Backend), callable
// from host C++. They enqueue on `stream` and return the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// x[i] = value for i in [0, n).
cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t stream);

LADDER_KERNELS_END
