// Residual add + LayerNorm on the GPU: the Tensor/Status face of
// kernels/residual_layernorm.cu. Same semantics as Backend::ResidualLayerNorm*
// (src/backend/backend.h); tensors must be on the GPU (Device::kCuda).
// Work is enqueued on `stream` (default: the legacy default stream) and not
// waited for: a fault inside a kernel surfaces at the next synchronization.
//
// Storage (backend.h "Precision"): the activations and LayerNorm weights of
// one call (forward: residual_in, branch, residual_out, y, gamma, beta;
// backward: d_residual, dy, x, gamma) share one dtype, f32 or bf16, set by
// residual_in (forward) or x (backward); a call mixing dtypes is
// InvalidArgument. mean, rstd, dgamma, dbeta and the scratch are f32 whatever
// the storage. Arithmetic is fp32 and each bf16 result is rounded once when
// stored: the forward normalizes residual_out as stored (its mean and rstd
// are those of the rounded values the backward reads as x), and the backward
// adds to d_residual in fp32 and rounds the sum once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

absl::Status ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean, Tensor rstd,
                                      Tensor residual_in, Tensor branch, Tensor gamma, Tensor beta,
                                      cudaStream_t stream = nullptr);

// Floats of GPU scratch ResidualLayerNormBackward needs for rows x cols.
int64_t ResidualLayerNormBackwardScratchFloats(int64_t rows, int64_t cols);

// scratch: an f32 GPU tensor of at least ResidualLayerNormBackwardScratchFloats
// elements (the per-block partial sums of dgamma/dbeta; its contents are
// overwritten). The owner of a workspace passes a slice of it.
absl::Status ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta, Tensor dy,
                                       Tensor x, Tensor gamma, Tensor mean, Tensor rstd,
                                       Tensor scratch, cudaStream_t stream = nullptr);

LADDER_CUDA_END
