// Launchers of kernels/embedding.cu: the token + position embedding over a
// vocabulary shard, with explicit positions, and its deterministic backward.
// Raw device pointers; work is enqueued on `stream` and the launch error
// returned. Shape and dtype checks live in the callers
// (src/backend/cuda/embedding.h).
//
// Storage: T is float or __nv_bfloat16 (both instantiated). The forward's
// out, wte and wpe are all T (the model's weights, or its bf16 copy, and the
// activations share one dtype); the backward reads dout as T and accumulates
// into fp32 dwte and dwpe. Arithmetic is fp32 (bf16 widened exactly on load,
// out rounded once, to nearest even, on store).
//
// Shapes: N rows (tokens), C channels. out/dout [N,C]; tokens, positions [N]
// i32; wte/dwte [vshard,C] holding the rows [vocab_start, vocab_start + vshard)
// of the full table; wpe/dwpe [max_t,C] or null.
//
// Ids are data, not trusted: a token outside [vocab_start, vocab_start +
// vshard) (negative ones included) or a position outside [0, max_t) simply
// contributes nothing, in both directions. The kernels never read or write
// out of bounds whatever the ids hold (the host validates ids before staging
// them; these rules are what keeps a bad id from corrupting memory).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// out[n,:] = (tokens[n] in the shard ? wte[tokens[n] - vocab_start,:] : 0)
//          + (wpe && positions[n] in [0, max_t) ? wpe[positions[n],:] : 0)
// Bitwise the CPU backend's (one fp32 add per element at most; for bf16,
// that fp32 value rounded once, and a lone term copied exactly).
template <typename T>
cudaError_t LaunchEmbeddingForward(T* out, const int32_t* tokens, const int32_t* positions,
                                   const T* wte, const T* wpe, int N, int C, int64_t vocab_start,
                                   int vshard, int max_t, cudaStream_t stream);

// Ints of device scratch the backward needs for N rows.
size_t EmbeddingBackwardScratchInts(int N);

// dwte[tokens[n] - vocab_start,:] += dout[n,:] for the tokens in the shard
// (skipped if dwte is null); dwpe[positions[n],:] += dout[n,:] for the
// positions in [0, max_t) (skipped if dwpe is null).
// Deterministic and bitwise equal to adding the rows one at a time in order
// n = 0, 1, ..., N-1 (which is what the CPU backend does), in fp32: each
// touched row is the old value plus its rows of dout (widened from bf16 when
// T is), summed in row order. No float atomics.
// scratch: EmbeddingBackwardScratchInts(N) ints (overwritten).
template <typename T>
cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                                    const int32_t* positions, int N, int C, int64_t vocab_start,
                                    int vshard, int max_t, int32_t* scratch, cudaStream_t stream);

LADDER_KERNELS_END
