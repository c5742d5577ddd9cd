// Causal self-attention on the GPU: the Tensor/Status face of
// kernels/attention.cu. Same semantics as Backend::AttentionForward and
// AttentionBackward (src/backend/backend.h); every tensor on the GPU
// (Device::kCuda). qkv, out, dout and dqkv share one storage dtype, f32 or
// bf16 (any other mix is InvalidArgument, naming the tensor); lse and the
// scratch are f32. Arithmetic is fp32 either way. Both kinds take both
// dtypes. kFlash takes no scratch and head sizes up to
// kernels::kMaxFlashHeadSize (256); kNaive takes any head size and a scratch
// of at least AttentionScratchFloats(kNaive, B, T, NH) floats. Work is
// enqueued on `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/backend/backend.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// out [B,T,C], lse [B,NH,T] from qkv [B,T,3C]; scratch as above.
absl::Status AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads, AttentionKind kind,
                              Tensor scratch, cudaStream_t stream = nullptr);

// dqkv [B,T,3C] (overwritten) from dout [B,T,C], qkv, out and lse.
absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int num_heads, AttentionKind kind, Tensor scratch,
                               cudaStream_t stream = nullptr);

LADDER_CUDA_END
