// Launchers of kernels/elementwise.cu: GELU (forward, backward) and the
// residual add, over n contiguous elements of one storage type T, float or
// __nv_bfloat16 (both instantiated; every pointer of a call is T). The
// arithmetic is fp32: bf16 elements are widened exactly on load and each
// result is rounded once, to nearest even, on store. Raw device pointers;
// work is enqueued on `stream` and the launch error returned (cudaSuccess
// when enqueued). Shape and dtype checks live in the callers
// (src/backend/cuda/elementwise.h).
//
// Any n >= 0 (n == 0 enqueues nothing). Pointers need only T's alignment:
// 16-byte vectors (4 floats or 8 bf16) are used when every pointer is 16-byte
// aligned, scalar accesses otherwise. The results do not depend on which path
// ran.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// out[i] = gelu(inp[i]), the tanh approximation evaluated as the CPU backend
// does (src/backend/cpu/gelu.cc): x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3).
// out may alias inp.
template <typename T>
cudaError_t LaunchGeluForward(T* out, const T* inp, int64_t n, cudaStream_t stream);

// dinp[i] = dout[i] * gelu'(inp[i]). dinp may alias dout (or inp).
template <typename T>
cudaError_t LaunchGeluBackward(T* dinp, const T* dout, const T* inp, int64_t n,
                               cudaStream_t stream);

// out[i] = a[i] + b[i], one fp32 add (bitwise the CPU's for float; that sum
// rounded once for bf16). out may alias a or b.
template <typename T>
cudaError_t LaunchResidualAdd(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);

LADDER_KERNELS_END
