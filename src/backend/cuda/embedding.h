// Token + position embedding on the GPU: the Tensor/Status face of
// kernels/embedding.cu. Backend::EmbeddingForward/Backward's semantics
// (src/backend/backend.h) with EXPLICIT positions: row n uses wpe[positions[n]]
// instead of wpe[n % T], so packed or offset sequences (decoding, several
// documents per row) need no special case. Tensors on the GPU (Device::kCuda);
// work is enqueued on `stream` and not waited for.
//
// Ids live on the GPU and are not checked here (that would need a copy back
// and a synchronization); the caller validates them on the host before
// staging. Whatever they hold, the kernels stay in bounds: a token outside
// the shard (or negative) and a position outside [0, maxT) contribute zero.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// out [N,C] (any leading dims), tokens and positions i32 with N elements
// each (any shape), wte [Vshard,C], wpe [maxT,C] or empty (then positions may
// be empty too). vocab_start >= 0. out, wte and wpe share one storage dtype,
// f32 or bf16 (backend.h "Precision"; with bf16, the model's bf16 weight
// copy, and each out element is the fp32 sum rounded once). A bf16 wte or wpe
// with an f32 out is InvalidArgument: bf16 weights with f32 activations are
// the CPU backend's serving format, not this backend's.
absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte, Tensor wpe,
                              int64_t vocab_start, cudaStream_t stream = nullptr);

// Ints of GPU scratch EmbeddingBackward needs for `rows` tokens.
int64_t EmbeddingBackwardScratchInts(int64_t rows);

// dwte[token - vocab_start,:] += dout[n,:] for tokens in the shard; dwpe
// [maxT,C] (or empty: skipped) gets dwpe[positions[n],:] += dout[n,:].
// dout f32 or bf16; dwte and dwpe f32 whatever dout's dtype (parameter
// gradients accumulate in fp32). Deterministic: bitwise the same as adding
// the (widened) rows in order n = 0..N-1 in fp32.
// scratch: an i32 GPU tensor of at least EmbeddingBackwardScratchInts(N)
// elements (overwritten).
absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                               Tensor positions, int64_t vocab_start, Tensor scratch,
                               cudaStream_t stream = nullptr);

LADDER_CUDA_END
