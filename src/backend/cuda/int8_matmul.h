// int8 weights on the GPU: the Tensor/Status face of kernels/int8_matmul.cu.
// Same semantics as Backend::MatmulInt8Forward and Backend::DequantizeRows
// (src/backend/backend.h); every tensor on the GPU (Device::kCuda), q in
// quantize.h's panel layout and 4-byte aligned. MatmulInt8Forward is the CPU
// backend's W8A8 computation bit for bit, for any number of tokens.
// DequantizeRows' row indices live on the GPU: one outside [0, OC) gives a
// row of NaN (the CPU backend returns InvalidArgument). Work is enqueued on
// `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// out [N,OC] = inp [N,C] @ dequant(q, scales)^T + bias [OC] (bias may be empty).
absl::Status MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales, Tensor bias,
                               cudaStream_t stream = nullptr);

// out [N,C] = dequant(q, scales)[rows[n], :], rows [N] i32.
absl::Status DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows,
                            cudaStream_t stream = nullptr);

LADDER_CUDA_END
