// Launchers of kernels/attention.cu: causal multi-head self-attention, forward
// and backward, callable from host C++ (g++). Raw device pointers, work
// enqueued on `stream`, the launch error returned (faults inside a kernel
// surface at the next synchronization). Shape checks live in the callers
// (src/backend/cuda/attention.h), which speak Tensor and Status.
//
// The contract is Backend::AttentionForward/AttentionBackward
// (src/backend/backend.h), for one head size HS and C = NH * HS:
//   qkv [B,T,3C]: per token q of all heads, then k, then v; head h uses
//                 channels [h*HS, (h+1)*HS) of each.
//   out [B,T,C] = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated.
//   lse [B,NH,T] = each row's log-sum-exp of the scaled scores.
//   dqkv [B,T,3C] (overwritten) from dout [B,T,C], qkv, out and lse.
// out must not alias qkv; dqkv aliases none of the inputs.
//
// Flash kernels keep nothing T x T in device memory and take no scratch. They
// hold a few 32 x HS tiles in shared memory, so HS is limited to
// kMaxFlashHeadSize, and T to 32 * 65535 query tiles (beyond either the
// launchers return cudaErrorInvalidValue).
// For bf16 storage with HS 64 or 128 the dispatcher (src/backend/cuda/
// attention.cc) runs the forward on tensor cores instead
// (kernels/flash_attention_tc.h: same contract, P rounded to bf16 before
// P V); the backward below reads its out and lse like the scalar forward's.
// Naive kernels need `scratch` of B*NH*T*T floats (AttentionScratchFloats) and
// take any HS. Every kernel is deterministic: each output element is written
// by one thread, its sums in an order fixed by the shape (no atomics).
//
// Storage is the element type of qkv, out, dout and dqkv (backend.h
// "Precision"): float or __nv_bfloat16, the only two instantiations. lse and
// the naive scratch are fp32 whatever the storage, and so is all arithmetic:
// elements are widened on load and each result is rounded once on store.
// (Storage, not T: T is the sequence length here.)
#pragma once

#include <cuda_runtime.h>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// Largest head size the flash kernels accept (shared memory of the backward's
// key-tile kernel: ~205 KiB at HS = 256, within the 227 KiB an H100 allows).
inline constexpr int kMaxFlashHeadSize = 256;

template <typename Storage>
cudaError_t LaunchFlashAttentionForward(Storage* out, float* lse, const Storage* qkv, int B, int T,
                                        int NH, int HS, cudaStream_t stream);

template <typename Storage>
cudaError_t LaunchFlashAttentionBackward(Storage* dqkv, const Storage* dout, const Storage* qkv,
                                         const Storage* out, const float* lse, int B, int T, int NH,
                                         int HS, cudaStream_t stream);

// scratch: B*NH*T*T floats (overwritten: the probabilities P of every head).
template <typename Storage>
cudaError_t LaunchNaiveAttentionForward(Storage* out, float* lse, float* scratch,
                                        const Storage* qkv, int B, int T, int NH, int HS,
                                        cudaStream_t stream);

// scratch: B*NH*T*T floats (overwritten: P, then dS in place).
template <typename Storage>
cudaError_t LaunchNaiveAttentionBackward(Storage* dqkv, float* scratch, const Storage* dout,
                                         const Storage* qkv, const Storage* out, const float* lse,
                                         int B, int T, int NH, int HS, cudaStream_t stream);

LADDER_KERNELS_END
