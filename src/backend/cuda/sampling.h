// Next-token sampling on the GPU: the Tensor/Status face of
// kernels/sampling.cu, with exactly the semantics of Backend::SampleTokens
// (src/backend/backend.h, defined by src/backend/token_sampling.h). logits
// f32 [N, Vp] on the GPU (Device::kCuda); ids in host memory.
//
// The specs are staged into `scratch` (at least SampleTokensScratchBytes(M)
// bytes of GPU memory, 8-byte aligned, on the stream's device), the kernel
// writes the ids after them, and the ids are copied back: unlike the other
// ops this one waits for `stream`, so it returns with ids filled in (and
// with the error of any earlier op on the stream, should one have failed).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/namespace.h"
#include "src/backend/token_sampling.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

int64_t SampleTokensScratchBytes(int64_t specs);

absl::Status SampleTokens(Tensor logits, int vocab_size, absl::Span<const TokenSampleSpec> specs,
                          absl::Span<int32_t> ids, Tensor scratch, cudaStream_t stream = nullptr);

LADDER_CUDA_END
