// Launchers of kernels/cross_entropy.cu: the vocabulary-parallel softmax
// cross-entropy of Backend::CrossEntropy* (src/backend/backend.h), in its four
// steps. Raw device pointers; work is enqueued on `stream` and the launch
// error returned. Shape checks live in the callers
// (src/backend/cuda/cross_entropy.h).
//
// logits/dlogits [N, vshard] row-major hold the global columns
// [vocab_start, vocab_start + vshard); of those, the first
// real = clamp(vocab_size - vocab_start, 0, vshard) are real vocabulary and
// the rest padding. targets [N] i32 (global ids); statistics [N] f32.
// Row reductions are done in a fixed order: bitwise reproducible.
//
// T is the storage type of logits and dlogits, float or __nv_bfloat16
// (backend.h "Precision"): elements are widened exactly on load, all
// arithmetic is fp32, the statistics (row_max, sum_exp, target_logit, lse,
// losses) are fp32 whatever T is, and dlogits is rounded once to T.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// row_max[n] = max of the row's real columns; -FLT_MAX when the shard has none.
template <typename T>
cudaError_t LaunchCrossEntropyRowMax(float* row_max, const T* logits, int N, int vshard,
                                     int64_t vocab_start, int vocab_size, cudaStream_t stream);

// sum_exp[n] = sum over real columns j of exp(logits[n,j] - row_max[n]);
// target_logit[n] = logits[n, targets[n] - vocab_start] if that column is a
// real column of this shard, else 0 (a target anywhere else, even an invalid
// one, is "not here": nothing out of bounds is read).
template <typename T>
cudaError_t LaunchCrossEntropyPartials(float* sum_exp, float* target_logit, const T* logits,
                                       const int32_t* targets, const float* row_max, int N,
                                       int vshard, int64_t vocab_start, int vocab_size,
                                       cudaStream_t stream);

// lse[n] = row_max[n] + log(sum_exp[n]);
// losses[n] = (row_max[n] - target_logit[n]) + log(sum_exp[n]). All f32.
cudaError_t LaunchCrossEntropyLoss(float* losses, float* lse, const float* row_max,
                                   const float* sum_exp, const float* target_logit, int N,
                                   cudaStream_t stream);

// dlogits[n,j] = dloss * exp(logits[n,j] - lse[n]), minus dloss at the target
// column, on real columns; 0 on padding. dlogits may alias logits (in place).
template <typename T>
cudaError_t LaunchCrossEntropyBackward(T* dlogits, const T* logits, const int32_t* targets,
                                       const float* lse, int N, int vshard, int64_t vocab_start,
                                       int vocab_size, float dloss, cudaStream_t stream);

// The four steps in one kernel over a whole vocabulary (vocab_start 0, no
// shard): losses and lse as Loss writes them, then the logits replaced in
// place by their gradient as Backward writes it (padding columns 0). Rows of
// vsize >= vocab_size. The same values within rounding: the sum of
// exponentials is accumulated online (each thread against its running max).
template <typename T>
cudaError_t LaunchCrossEntropyFused(float* losses, float* lse, T* logits, const int32_t* targets,
                                    int N, int vsize, int vocab_size, float dloss,
                                    cudaStream_t stream);

LADDER_KERNELS_END
