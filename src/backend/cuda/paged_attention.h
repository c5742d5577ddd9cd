// The paged KV cache on the GPU: the Tensor/Status face of
// kernels/paged_attention.cu. Same semantics as Backend::KvCacheWrite and
// Backend::PagedAttentionForward (src/backend/backend.h), fp32 and int8
// caches; every tensor on the GPU (Device::kCuda). Shapes and dtypes are
// checked here; the index tensors' values (slots, seq, pos, block_tables)
// live on the GPU and are checked by the kernels, which skip an out-of-range
// slot and write NaN for a token whose indices fall outside the tables or the
// cache (the CPU backend returns InvalidArgument for those). Work is enqueued
// on `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/backend/backend.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// Rows slots[n] (i32 [N]) of the caches = the k and v parts of qkv [N,3C].
absl::Status KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots, int num_heads,
                          cudaStream_t stream = nullptr);

// Floats of GPU scratch PagedAttentionForward needs for a qkv [N,3C] and
// block_tables [num_seqs, max_blocks] (its split-K partials); 0 for shapes
// it rejects anyway.
int64_t PagedAttentionScratchFloats(const Tensor& qkv, const Tensor& block_tables, int num_heads);

// out [N,C]: causal attention of the N query tokens of qkv [N,3C] over the
// cache, through block_tables [num_seqs, max_blocks], seq [N] and pos [N].
// scratch: f32, at least PagedAttentionScratchFloats(qkv, block_tables,
// num_heads) floats.
absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                   Tensor block_tables, Tensor seq, Tensor pos, int num_heads,
                                   Tensor scratch, cudaStream_t stream = nullptr);

LADDER_CUDA_END
