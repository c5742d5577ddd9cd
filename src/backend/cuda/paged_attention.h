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

// out [N,C]: causal attention of the N query tokens of qkv [N,3C] over the
// cache, through block_tables [num_seqs, max_blocks], seq [N] and pos [N].
absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                   Tensor block_tables, Tensor seq, Tensor pos, int num_heads,
                                   cudaStream_t stream = nullptr);

LADDER_CUDA_END
