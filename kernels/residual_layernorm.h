// Launchers of kernels/residual_layernorm.cu, callable from host C++ (g++).
// They take raw device pointers, enqueue on `stream` and return the launch
// error (cudaSuccess when enqueued; faults inside a kernel surface at the next
// synchronization). Shape and dtype checks live in the callers
// (src/backend/cuda/residual_layernorm.h), which speak Tensor and Status.
//
// T is the element type of activations and LayerNorm weights; statistics
// (mean, rstd), dgamma/dbeta and the scratch are always fp32. Instantiated for
// T = float.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// residual_out = residual_in + branch; y = (residual_out - mean) * rstd * gamma + beta.
// Rows: N, channels: C (all [N,C] row-major; gamma, beta [C]; mean, rstd [N]).
// branch == nullptr means no add: residual_out must be null too and the
// LayerNorm reads residual_in.
template <typename T>
cudaError_t LaunchResidualLayerNormForward(T* residual_out, T* y, float* mean, float* rstd,
                                           const T* residual_in, const T* branch, const T* gamma,
                                           const T* beta, int N, int C, cudaStream_t stream);

// Floats of device scratch the backward needs for N rows of C channels.
size_t ResidualLayerNormBackwardScratchFloats(int N, int C);

// d_residual += dLayerNorm/dx (dy); dgamma += sum_rows dy * xhat; dbeta += sum_rows dy.
// x is the LayerNorm's input (the forward's residual_out, or residual_in when
// it had no add). scratch: ResidualLayerNormBackwardScratchFloats(N, C) floats.
// Deterministic: no atomics; the reduction order depends only on (N, C).
template <typename T>
cudaError_t LaunchResidualLayerNormBackward(T* d_residual, float* dgamma, float* dbeta,
                                            float* scratch, const T* dy, const T* x, const T* gamma,
                                            const float* mean, const float* rstd, int N, int C,
                                            cudaStream_t stream);

LADDER_KERNELS_END
