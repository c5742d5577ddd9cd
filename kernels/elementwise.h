// Launchers of kernels/elementwise.cu: GELU (forward, backward) and the
// residual add, over n contiguous fp32 elements. Raw device pointers; work is
// enqueued on `stream` and the launch error returned (cudaSuccess when
// enqueued). Shape checks live in the callers (src/backend/cuda/elementwise.h).
//
// Any n >= 0 (n == 0 enqueues nothing). Pointers need only float alignment:
// 16-byte vectors are used when every pointer is 16-byte aligned, scalar
// accesses otherwise. The results do not depend on which path ran.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// out[i] = gelu(inp[i]), the tanh approximation evaluated as the CPU backend
// does (src/backend/cpu/gelu.cc): x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3).
// out may alias inp.
cudaError_t LaunchGeluForward(float* out, const float* inp, int64_t n, cudaStream_t stream);

// dinp[i] = dout[i] * gelu'(inp[i]). dinp may alias dout (or inp).
cudaError_t LaunchGeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                               cudaStream_t stream);

// out[i] = a[i] + b[i] (an fp32 add: bitwise the CPU's). out may alias a or b.
cudaError_t LaunchResidualAdd(float* out, const float* a, const float* b, int64_t n,
                              cudaStream_t stream);

LADDER_KERNELS_END
