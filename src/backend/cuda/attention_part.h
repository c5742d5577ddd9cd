// Attention by positions on the GPU (context parallelism's ring steps): the
// Tensor/Status face of kernels/attention_part.cu. Same semantics as
// Backend::AttentionPartForward and AttentionPartBackward
// (src/backend/backend.h); every tensor on the GPU (Device::kCuda). q_qkv,
// kv_qkv, out, dout, dq_qkv and dkv_qkv share one storage dtype, f32 or bf16
// (any other mix is InvalidArgument, naming the tensor); lse is f32, q_pos
// and k_pos i32. Head sizes up to kernels::kMaxFlashHeadSize (256). Work is
// enqueued on `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// out [B,Tq,C], lse [B,NH,Tq]: this block's result (merge false) or merged into theirs.
absl::Status AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv, Tensor q_pos,
                                  Tensor k_pos, int num_heads, bool merge,
                                  cudaStream_t stream = nullptr);

// dq_qkv [B,Tq,3C] and dkv_qkv [B,Tk,3C] accumulate this block's gradients.
absl::Status AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout, Tensor q_qkv,
                                   Tensor kv_qkv, Tensor out, Tensor lse, Tensor q_pos,
                                   Tensor k_pos, int num_heads, cudaStream_t stream = nullptr);

LADDER_CUDA_END
