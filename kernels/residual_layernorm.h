// Launchers of kernels/residual_layernorm.cu, callable from host C++ (g++).
// They take raw device pointers, enqueue on `stream` and return the launch
// error (cudaSuccess when enqueued; faults inside a kernel surface at the next
// synchronization). Shape and dtype checks live in the callers
// (src/backend/cuda/residual_layernorm.h), which speak Tensor and Status.
//
// T is the storage type of activations and LayerNorm weights, float or
// __nv_bfloat16 (backend.h "Precision"); statistics (mean, rstd), dgamma/dbeta
// and the scratch are always fp32, and all arithmetic is fp32. A bf16 result
// is rounded once, to nearest even, when stored.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// residual_out = residual_in + branch; y = (residual_out - mean) * rstd * gamma + beta.
// Rows: N, channels: C (all [N,C] row-major; gamma, beta [C]; mean, rstd [N]).
// branch == nullptr means no add: residual_out must be null too and the
// LayerNorm reads residual_in. The LayerNorm normalizes residual_out as
// stored (rounded to T): mean, rstd and y are those of the x the backward
// will read.
template <typename T>
cudaError_t LaunchResidualLayerNormForward(T* residual_out, T* y, float* mean, float* rstd,
                                           const T* residual_in, const T* branch, const T* gamma,
                                           const T* beta, int N, int C, cudaStream_t stream);

// Floats of device scratch the backward needs for N rows of C channels.
size_t ResidualLayerNormBackwardScratchFloats(int N, int C);

// d_residual += dLayerNorm/dx (dy), added in fp32 and rounded once to T;
// dgamma += sum_rows dy * xhat; dbeta += sum_rows dy (fp32 sums).
// x is the LayerNorm's input (the forward's residual_out, or residual_in when
// it had no add). scratch: ResidualLayerNormBackwardScratchFloats(N, C) floats.
// Deterministic: no atomics; the reduction order depends only on (N, C).
template <typename T>
cudaError_t LaunchResidualLayerNormBackward(T* d_residual, float* dgamma, float* dbeta,
                                            float* scratch, const T* dy, const T* x, const T* gamma,
                                            const float* mean, const float* rstd, int N, int C,
                                            cudaStream_t stream);

LADDER_KERNELS_END
