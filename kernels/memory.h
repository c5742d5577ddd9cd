// Launchers of kernels/memory.cu (the memory helpers of Backend), callable
// from host C++. They enqueue on `stream` and return the launch error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// x[i] = value for i in [0, n).
// x[0, n) = value (rounded to nearest for T = __nv_bfloat16).
template <typename T>
cudaError_t LaunchFill(T* x, int64_t n, float value, cudaStream_t stream);

LADDER_KERNELS_END
