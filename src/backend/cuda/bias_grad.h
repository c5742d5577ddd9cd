// The bias gradient of a linear layer on the GPU: the Tensor/Status face of
// kernels/bias_grad.cu (the dbias part of Backend::MatmulBackward). Tensors
// on the GPU (Device::kCuda); work is enqueued on `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// Floats of GPU scratch BiasGrad needs for a dout of rows x cols.
int64_t BiasGradScratchFloats(int64_t rows, int64_t cols);

// dbias [OC] f32 += column sums of dout [N,OC] (leading dims may be split),
// dout f32 or bf16 (the activations' storage dtype, backend.h "Precision"):
// summed in fp32 either way, dbias is never bf16. Deterministic (bitwise
// reproducible; no atomics; a bf16 dout gives the bits of an f32 dout holding
// the same values). scratch: f32, at least BiasGradScratchFloats(N, OC)
// elements (overwritten).
absl::Status BiasGrad(Tensor dbias, Tensor dout, Tensor scratch, cudaStream_t stream = nullptr);

LADDER_CUDA_END
