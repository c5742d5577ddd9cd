// Launcher of kernels/flash_attention_tc.cu: the tensor-core (mma.sync bf16)
// flash attention forward, for bf16 storage and head sizes 64 and 128. Same
// contract as LaunchFlashAttentionForward<__nv_bfloat16> (kernels/attention.h:
// qkv [B,T,3C] in, out [B,T,C] and lse [B,NH,T] f32 out), with P rounded to
// bf16 before P V (the .cu's opening comment says what that changes). The
// dispatcher (src/backend/cuda/attention.cc) calls it when
// FlashAttentionTcApplies holds and the scalar kernel otherwise; likewise
// the backward (LaunchFlashAttentionBackwardTc, FlashAttentionTcBackwardApplies).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// Head sizes the tensor-core kernels are compiled for.
inline constexpr bool FlashAttentionTcHeadSize(int HS) { return HS == 64 || HS == 128; }

// True iff LaunchFlashAttentionForwardTc takes this call: a supported head
// size, and qkv and out 16-byte aligned (cp.async reads 16-byte pieces of qkv
// rows; out is written as bf16 pairs).
inline bool FlashAttentionTcApplies(const void* out, const void* qkv, int HS) {
  return FlashAttentionTcHeadSize(HS) && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
}

// True iff LaunchFlashAttentionBackwardTc takes this call: a supported head
// size and every tensor 16-byte aligned (cp.async reads qkv and dout rows;
// dout and out are read, dqkv written, as bf16 pairs).
inline bool FlashAttentionTcBackwardApplies(const void* dqkv, const void* dout, const void* qkv,
                                            const void* out, int HS) {
  return FlashAttentionTcApplies(out, qkv, HS) && reinterpret_cast<uintptr_t>(dqkv) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(dout) % 16 == 0;
}

// cudaErrorInvalidValue unless FlashAttentionTcApplies(out, qkv, HS) and
// T < 64 * 65536 (query tiles within gridDim.y); nothing to do for an empty
// shape.
cudaError_t LaunchFlashAttentionForwardTc(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                          int B, int T, int NH, int HS, cudaStream_t stream);

// The backward on tensor cores: the contract of
// LaunchFlashAttentionBackward<__nv_bfloat16> (kernels/attention.h: dqkv
// [B,T,3C] written whole from dout, qkv, out [B,T,C] and lse [B,NH,T]),
// with P and dS rounded to bf16 as the operands of their products
// (kernels/flash_attention_tc.cu). cudaErrorInvalidValue unless
// FlashAttentionTcBackwardApplies and T < 64 * 65536.
cudaError_t LaunchFlashAttentionBackwardTc(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                           const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                           const float* lse, int B, int T, int NH, int HS,
                                           cudaStream_t stream);

LADDER_KERNELS_END
