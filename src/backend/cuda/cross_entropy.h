// Vocabulary-parallel softmax cross-entropy on the GPU: the Tensor/Status
// face of kernels/cross_entropy.cu, with exactly the semantics of
// Backend::CrossEntropyRowMax / Partials / Loss / Backward
// (src/backend/backend.h): row-wise [N, Vshard] views of the shard's logits,
// targets [N] i32, statistics [N] f32. Tensors on the GPU (Device::kCuda);
// work is enqueued on `stream` and not waited for.
//
// Storage (backend.h "Precision"): logits are f32 or bf16, and dlogits has
// the logits' dtype (a mixed call is InvalidArgument); the statistics
// (row_max, sum_exp, target_logit, lse, losses) are f32 whatever the logits
// are. Arithmetic is fp32 on the widened logits; only dlogits is rounded
// (once, to nearest even) when it is bf16.
//
// Targets live on the GPU and are not range-checked here (the caller
// validates them on the host before staging); a target outside [0, V) is
// treated as "not in this shard" and nothing is read out of bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

absl::Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size,
                                cudaStream_t stream = nullptr);
absl::Status CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                  Tensor targets, Tensor row_max, int64_t vocab_start,
                                  int vocab_size, cudaStream_t stream = nullptr);
absl::Status CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                              Tensor target_logit, cudaStream_t stream = nullptr);
// dlogits may alias logits (in place).
absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets, Tensor lse,
                                  int64_t vocab_start, int vocab_size, float dloss,
                                  cudaStream_t stream = nullptr);

// Backend::CrossEntropyFused; logits [N, Vp] f32 or bf16, overwritten.
absl::Status CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                               int vocab_size, float dloss, cudaStream_t stream = nullptr);

LADDER_CUDA_END
