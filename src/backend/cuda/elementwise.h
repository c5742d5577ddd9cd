// GELU and the residual add on the GPU: the Tensor/Status face of
// kernels/elementwise.cu. Same semantics as Backend::GeluForward,
// GeluBackward and ResidualAdd (src/backend/backend.h): row-wise views,
// tensors on the GPU (Device::kCuda). Every tensor of a call is f32, or every
// one is bf16 (backend.h "Precision": computed in fp32, each result rounded
// once to bf16); another dtype, or a mix, is InvalidArgument naming the
// tensor. Work is enqueued on `stream` (default: the legacy default stream)
// and not waited for.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// out = gelu(inp) (tanh approximation, as GPT-2).
absl::Status GeluForward(Tensor out, Tensor inp, cudaStream_t stream = nullptr);
// dinp = dout * gelu'(inp) (overwritten; dinp may alias dout).
absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp, cudaStream_t stream = nullptr);
// out = a + b (out may alias a or b).
absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b, cudaStream_t stream = nullptr);

LADDER_CUDA_END
