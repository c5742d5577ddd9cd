// Launcher of kernels/bias_grad.cu: the bias gradient of a linear layer,
// dbias[OC] += column sums of dout [N, OC] (the matmul's backward; the two
// GEMMs go to cuBLASLt). dout is T, float or __nv_bfloat16 (both
// instantiated); dbias and the scratch are fp32, and so are the sums (bf16
// elements are widened exactly). Raw device pointers; work is enqueued on `stream`
// and the launch error returned. Shape checks live in the caller
// (src/backend/cuda/bias_grad.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// Floats of device scratch LaunchBiasGrad needs for an [N, OC] dout.
size_t BiasGradScratchFloats(int N, int OC);

// dbias[j] += sum_n dout[n, j], in fp32. Deterministic: no atomics, the
// order of the adds depends only on (N, OC) (not on T, nor on dout's
// alignment), so the result is bitwise reproducible, and a bf16 dout gives
// the bits of an f32 dout holding the same values.
// scratch: BiasGradScratchFloats(N, OC) floats (overwritten).
template <typename T>
cudaError_t LaunchBiasGrad(float* dbias, const T* dout, float* scratch, int N, int OC,
                           cudaStream_t stream);

LADDER_KERNELS_END
