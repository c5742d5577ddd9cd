// Launchers of kernels/optimizer.cu: the gradient norm's sum of squares and a
// multi-tensor AdamW. Raw device pointers; work is enqueued on `stream` and
// the launch error returned. Shape checks live in the callers
// (src/backend/cuda/optimizer.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/adamw_element.h"
#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// ---- sum of squares ---------------------------------------------------------------

// Doubles of device scratch LaunchSumOfSquares needs for n elements (8-byte
// aligned).
size_t SumOfSquaresScratchDoubles(int64_t n);

// *out = sum_i x[i]^2 (one float on the device, overwritten; 0 for n == 0),
// accumulated in double and rounded to float once. Deterministic: the order
// of the adds depends only on n. scratch: SumOfSquaresScratchDoubles(n)
// doubles (overwritten).
cudaError_t LaunchSumOfSquares(float* out, const float* x, int64_t n, double* scratch,
                               cudaStream_t stream);

// ---- multi-tensor AdamW -------------------------------------------------------------

// One parameter tensor of n floats with its gradient and moments, all
// contiguous on the device. chunk_begin is filled by PlanAdamWChunks.
struct AdamWTensor {
  float* param;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
  float weight_decay;   // decoupled; 0 for biases and LayerNorm weights
  int64_t chunk_begin;  // index of the tensor's first chunk in the concatenation
  // If not null, receives the updated param rounded stochastically to bf16,
  // element i with the random word of index round_offset + i (philox.cuh).
  __nv_bfloat16* param16;
  int64_t round_offset;
};

// The step's hyper-parameters shared by all tensors: AdamW's scalars
// (kernels/adamw_element.h) and the stochastic rounding of param16.
struct AdamWStep {
  AdamWScalars scalars;
  uint64_t round_seed, round_step;
};

// Elements per chunk: the unit of work a block takes at a time. A tensor's
// chunks never cross into the next tensor.
inline constexpr int64_t kAdamWChunk = 16384;

// Fills chunk_begin of tensors[0, count) (host memory) and returns the total
// number of chunks.
int64_t PlanAdamWChunks(AdamWTensor* tensors, int count);

// One launch updates every tensor, per element AdamWElement
// (kernels/adamw_element.h, the CPU backend's arithmetic bit for bit), then
//   param16 = StochasticRoundBf16(param, PhiloxWord(round_seed,
//             kRoundingStream + round_step, round_offset + i))   (if param16)
// tensors: `count` descriptors in DEVICE memory, planned by PlanAdamWChunks
// (total_chunks is its result). Tensors must not overlap one another.
cudaError_t LaunchAdamW(const AdamWTensor* tensors, int count, int64_t total_chunks,
                        const AdamWStep& step, cudaStream_t stream);

// ---- bf16 copies ----------------------------------------------------------------------

// dst[i] = src[i] rounded to bf16: to nearest even if !stochastic, else
// StochasticRoundBf16 with PhiloxWord(seed, kRoundingStream + step, offset + i).
cudaError_t LaunchRoundToBf16(__nv_bfloat16* dst, const float* src, int64_t n, bool stochastic,
                              uint64_t seed, uint64_t step, int64_t offset, cudaStream_t stream);

LADDER_KERNELS_END
