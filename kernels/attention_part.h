// Launchers of kernels/attention_part.cu: attention by positions, one block
// of context parallelism's ring, forward and backward, callable from host C++
// (g++). Raw device pointers, work enqueued on `stream`, the launch error
// returned (faults inside a kernel surface at the next synchronization).
// Shape checks live in the callers (src/backend/cuda/attention_part.h).
//
// The contract is Backend::AttentionPartForward/AttentionPartBackward
// (src/backend/backend.h), for one head size HS and C = NH * HS:
//   q_qkv [B,Tq,3C], kv_qkv [B,Tk,3C]: packed like attention.h's qkv; the
//       q part of q_qkv and the k, v parts of kv_qkv are read.
//   q_pos [Tq], k_pos [Tk]: positions; query i sees key j iff k_pos[j] <= q_pos[i].
//   forward: out [B,Tq,C], lse [B,NH,Tq] = this block's attention and
//       log-sum-exp (0 and -inf for a query that sees no key), or with
//       `merge` that result merged by log-sum-exp into what they hold.
//   backward: from dout, the final out and lse, adds dq into the q part of
//       dq_qkv [B,Tq,3C] and dk, dv into the k, v parts of dkv_qkv
//       [B,Tk,3C] (which may be one buffer; nothing else is written).
// HS up to kMaxFlashHeadSize (kernels/attention.h) and at most 32 * 65535
// tiles of Tq or Tk, else cudaErrorInvalidValue. No scratch; deterministic
// (no atomics, sums in an order fixed by the shape).
//
// Storage is the element type of q_qkv, kv_qkv, out, dout and the gradients:
// float or __nv_bfloat16; lse is fp32 and all arithmetic is too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

template <typename Storage>
cudaError_t LaunchAttentionPartForward(Storage* out, float* lse, const Storage* q_qkv,
                                       const Storage* kv_qkv, const int32_t* q_pos,
                                       const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                       bool merge, cudaStream_t stream);

template <typename Storage>
cudaError_t LaunchAttentionPartBackward(Storage* dq_qkv, Storage* dkv_qkv, const Storage* dout,
                                        const Storage* q_qkv, const Storage* kv_qkv,
                                        const Storage* out, const float* lse, const int32_t* q_pos,
                                        const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                        cudaStream_t stream);

LADDER_KERNELS_END
