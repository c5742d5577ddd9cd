// Launchers of kernels/paged_attention.cu: the paged KV cache of serving,
// written and attended, callable from host C++ (g++). Raw device pointers,
// work enqueued on `stream`, the launch error returned. Shape checks live in
// the callers (src/backend/cuda/paged_attention.h).
//
// The contract is Backend::KvCacheWrite and Backend::PagedAttentionForward
// (src/backend/backend.h): a cache of S rows (blocks of kKvBlockRows rows) of
// C = NH * HS channels, k and v alike, fp32 or int8 with one f32 scale per
// (row, head) (k_scale, v_scale [S, NH]; x ~= q * scale, quantize.h
// QuantizeSymmetric, bit for bit). qkv rows are [3C]: q, k, v. The
// activations (qkv and out) are fp32 or bf16, one type per call: bf16 is
// widened exactly on load and the output rounded once to nearest even.
//
// The index arrays (slots, seq, pos, block_tables) live on the device, where
// the host cannot check them without a synchronization. The kernels check
// each before using it and never read or write out of bounds: a token whose
// slot is outside [0, S) is not written to the cache, and a token whose
// sequence, position or block is outside the tables or the cache gets NaN
// for every output channel of every head (the CPU backend rejects those
// calls with InvalidArgument instead).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

inline constexpr int kKvBlockRows = 16;  // cache rows per block (src/serve/kv_blocks.h)

// Rows slots[n] of the caches = the k and v parts of qkv[n] (N tokens).
// A, the activations' type (qkv, and the attention's out): float or
// __nv_bfloat16, both instantiated.
template <typename A>
cudaError_t LaunchKvCacheWriteF32(float* k_cache, float* v_cache, const A* qkv,
                                  const int32_t* slots, int N, int S, int NH, int HS,
                                  cudaStream_t stream);
template <typename A>
cudaError_t LaunchKvCacheWriteI8(int8_t* k_cache, int8_t* v_cache, float* k_scale, float* v_scale,
                                 const A* qkv, const int32_t* slots, int N, int S, int NH, int HS,
                                 cudaStream_t stream);

// Split-K: positions are attended in splits of kPagedSplitBlocks cache
// blocks, merged by log-sum-exp (kernels/paged_attention.cu).
inline constexpr int kPagedSplitBlocks = 8;
// The splits of a table of max_blocks columns (the longest a sequence can be).
inline constexpr int PagedSplits(int max_blocks) {
  return (max_blocks + kPagedSplitBlocks - 1) / kPagedSplitBlocks;
}
// Floats of scratch PagedAttention needs: each (token, head, split)'s
// partial output and its max and sum.
inline constexpr int64_t PagedAttentionScratchFloats(int64_t N, int64_t NH, int64_t HS,
                                                     int max_blocks) {
  return N * NH * PagedSplits(max_blocks) * (HS + 2);
}

// out [N, C]: token n (query qkv[n, 0:C]) of sequence seq[n] at position
// pos[n] attends to that sequence's positions 0..pos[n], position p at cache
// row block_tables[seq[n] * max_blocks + p / 16] * 16 + p % 16.
// k_scale/v_scale: null for an fp32 cache. scratch: device floats, at least
// PagedAttentionScratchFloats(N, NH, HS, max_blocks).
template <typename A>
cudaError_t LaunchPagedAttentionF32(A* out, float* scratch, const A* qkv, const float* k_cache,
                                    const float* v_cache, const int32_t* block_tables,
                                    const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                    int HS, int num_seqs, int max_blocks, cudaStream_t stream);
template <typename A>
cudaError_t LaunchPagedAttentionI8(A* out, float* scratch, const A* qkv, const int8_t* k_cache,
                                   const int8_t* v_cache, const float* k_scale,
                                   const float* v_scale, const int32_t* block_tables,
                                   const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                   int HS, int num_seqs, int max_blocks, cudaStream_t stream);

LADDER_KERNELS_END
