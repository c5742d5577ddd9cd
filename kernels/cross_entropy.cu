// Softmax cross-entropy over a vocabulary shard: the four steps of
// Backend::CrossEntropy* (src/backend/backend.h; CPU reference in
// src/backend/cpu/cross_entropy.cc), one kernel each.
//
// The logits are the largest activation of GPT-2 ([N, 50304]: 1.6 GB in fp32,
// 0.8 GB in bf16, for 8192 tokens), and every step is a pass over them with a
// few FLOPs per element, so every step is bound by memory bandwidth. Per row
// of V columns stored in S bytes each (S = 4 for f32, 2 for bf16):
//   RowMax     reads SV bytes, V compares
//   Partials   reads SV bytes, V subtract + exp + add
//   Loss       reads 12 bytes, writes 8 (per row only: [N] statistics)
//   Backward   reads SV, writes SV bytes, V subtract + exp + multiply
// What is fused is the arithmetic into those passes, never a second one:
// the max, the sum of exponentials and the target's logit each come out of a
// single read, and the backward turns the logits into their gradient in
// place (softmax recomputed from the saved lse), so no [N, V] probability
// tensor ever exists. The steps cannot be merged into fewer passes: under
// tensor parallelism an all-reduce over ranks sits between RowMax and
// Partials, and between Partials and Loss. (An online max-and-sum in one pass
// would save RowMax's read on one GPU; it would not match the CPU op's
// definition, which exponentiates against the global max.)
//
// Launch shape: one block per row, of kMaxThreads = 512 threads for a long
// row (tens of thousands of columns): 512 16-byte loads in flight per row,
// and the grid of N rows (hundreds to thousands) fills every SM; the block's
// reduction costs two warp-shuffle trees and one barrier per row, nothing
// next to the row's reads. A row of fewer vectors (a small vocabulary, or a
// narrow tensor-parallel shard) gets one thread per vector rounded up to
// whole warps (RowThreads), so no warp joins the reduction with nothing to
// add: a 256-column bf16 row is one warp, not 16 of which 15 idle. Thread t
// of a block of B takes vectors t, t + B, ... of the row's real columns (16
// bytes each, kVec = 4 floats or 8 bf16, when the row starts 16-byte
// aligned, i.e. vshard % kVec == 0 and an aligned base, which a padded
// vocabulary always gives), then the < kVec trailing real columns one each.
// Each thread accumulates its elements in that fixed order; each warp
// combines its lanes with the fixed xor butterfly of WarpSum, and the warps'
// results go through the same butterfly once more: every add's order
// depends only on the shape, not on timing.
//
// Numerics follow the CPU op: exp against the GLOBAL max (every term <= 1),
// the loss as (max - target_logit) + log(sum) so a confident prediction's
// small loss keeps its digits, and the backward's target column as
// exp(x - lse) * dloss - dloss. expf and logf differ from the CPU's by a few
// ulp, and either compiler may fuse that multiply and subtraction into an FMA.
//
// Element type (backend.h "Precision"): T, float or __nv_bfloat16, is the
// storage of logits and dlogits. Each logit is widened exactly on load and
// all arithmetic is fp32; every statistic (row_max, sum_exp, target_logit,
// lse, losses) is stored fp32, and only dlogits is rounded (once, to nearest
// even) to T. row_max and target_logit of bf16 logits are therefore exact
// bf16 values held in floats.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/cross_entropy.h"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / kWarpSize;
constexpr int kLossThreads = 256;

__device__ __forceinline__ float Max(float a, float b) { return b > a ? b : a; }

__device__ __forceinline__ float RowWarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = Max(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// The block's sum (kMax: max) of v, returned to every thread: a warp tree,
// the warps' results through shared memory (one float per warp), then a
// second tree over them in warp order. Called once per kernel (its shared memory is
// not reused).
template <bool kMax>
__device__ __forceinline__ float BlockReduce(float v, float* warp_results) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  v = kMax ? RowWarpMax(v) : WarpSum(v);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  v = lane < static_cast<int>(blockDim.x) / kWarpSize ? warp_results[lane] : identity;
  return kMax ? RowWarpMax(v) : WarpSum(v);
}

// Calls f(column, value) for every real column of row x, in this thread's
// fixed order: its vectors, then its trailing element. value is the element
// widened to fp32.
template <int kVec, typename T, typename F>
__device__ __forceinline__ void ForRealColumns(const T* x, int real, F f) {
  const int nvec = real / kVec;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, kVec> xv = LoadVec<kVec>(x + static_cast<int64_t>(v) * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) f(v * kVec + k, ToFloat(xv.v[k]));
  }
  const int i = nvec * kVec + static_cast<int>(threadIdx.x);
  if (i < real) f(i, ToFloat(x[i]));
}

// One row's gradient, d = dloss * (exp(x - lse) - [column == j]) on the real
// columns and 0 on the padding, in this thread's columns; d may be x (each
// element is loaded, then stored by the same thread).
template <int kVec, typename T>
__device__ __forceinline__ void WriteRowGrad(T* d, const T* x, int vshard, int real, int64_t j,
                                             float lse, float dloss) {
  auto grad = [&](int i, float xi) {
    float g = expf(xi - lse) * dloss;
    if (i == j) g -= dloss;
    return g;
  };
  const int nvec = real / kVec;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    Vec<T, kVec> xv = LoadVec<kVec>(x + static_cast<int64_t>(v) * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) xv.v[k] = FromFloat<T>(grad(v * kVec + k, ToFloat(xv.v[k])));
    StoreVec<kVec>(d + static_cast<int64_t>(v) * kVec, xv);
  }
  for (int i = nvec * kVec + threadIdx.x; i < vshard; i += blockDim.x) {
    // The trailing real columns, then padding.
    d[i] = FromFloat<T>(i < real ? grad(i, ToFloat(x[i])) : 0.0f);
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    RowMaxKernel(float* __restrict__ row_max, const T* __restrict__ logits, int vshard, int real) {
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * vshard;
  float m = -INFINITY;
  ForRealColumns<kVec>(x, real, [&](int, float xi) { m = Max(m, xi); });
  m = BlockReduce<true>(m, DynamicShared<float>());
  // A shard of padding only: the lowest finite float, which a MAX all-reduce
  // ignores and which never produces an infinity downstream.
  if (threadIdx.x == 0) row_max[blockIdx.x] = real > 0 ? m : -FLT_MAX;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    PartialsKernel(float* __restrict__ sum_exp, float* __restrict__ target_logit,
                   const T* __restrict__ logits, const int32_t* __restrict__ targets,
                   const float* __restrict__ row_max, int vshard, int real, int64_t vocab_start) {
  const int n = blockIdx.x;
  const T* x = logits + static_cast<int64_t>(n) * vshard;
  const float m = row_max[n];
  float s = 0.0f;
  ForRealColumns<kVec>(x, real, [&](int, float xi) { s += expf(xi - m); });
  s = BlockReduce<false>(s, DynamicShared<float>());
  if (threadIdx.x == 0) {
    sum_exp[n] = s;
    const int64_t j = int64_t{targets[n]} - vocab_start;
    target_logit[n] = j >= 0 && j < real ? ToFloat(x[j]) : 0.0f;
  }
}

__global__ void __launch_bounds__(kLossThreads)
    LossKernel(float* __restrict__ losses, float* __restrict__ lse,
               const float* __restrict__ row_max, const float* __restrict__ sum_exp,
               const float* __restrict__ target_logit, int N) {
  const int n = blockIdx.x * kLossThreads + threadIdx.x;
  if (n >= N) return;
  const float m = row_max[n];
  const float log_s = logf(sum_exp[n]);
  lse[n] = m + log_s;
  losses[n] = (m - target_logit[n]) + log_s;
}

// No __restrict__: dlogits may be logits. Each element is loaded, then stored
// by the same thread.
template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    BackwardKernel(T* dlogits, const T* logits, const int32_t* __restrict__ targets,
                   const float* __restrict__ lse, int vshard, int real, int64_t vocab_start,
                   float dloss) {
  const int n = blockIdx.x;
  const int64_t row = static_cast<int64_t>(n) * vshard;
  const T* x = logits + row;
  T* d = dlogits + row;
  // (j may be outside the shard.)
  WriteRowGrad<kVec>(d, x, vshard, real, int64_t{targets[n]} - vocab_start, lse[n], dloss);
}

// The classifier in one kernel (the whole vocabulary on one device: no
// all-reduce between the steps), llm.c's fused classifier: one read of the
// row keeps a running (max, sum of exponentials) per thread, rescaling the
// sum when the max grows (online softmax); the block merges the pairs in a
// fixed butterfly; the loss and lse follow; a second read of the row (from
// L2, it was just read) writes the gradient in place. The probabilities
// are never stored. The same values as the four kernels above within
// rounding (the sum is accumulated against each thread's running max, then
// rescaled, instead of against the row's max).
struct MaxSum {
  float m, s;
};

// (m1, s1) and (m2, s2) as one pair against the larger max; a side with no
// element (s == 0, m == -inf) contributes nothing.
__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  const float m = Max(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum WarpMerge(MaxSum v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const MaxSum o{__shfl_xor_sync(kFullMask, v.m, offset),
                   __shfl_xor_sync(kFullMask, v.s, offset)};
    v = Merge(v, o);
  }
  return v;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    FusedKernel(float* __restrict__ losses, float* __restrict__ lse, T* logits,
                const int32_t* __restrict__ targets, int vshard, int real, float dloss) {
  const int n = blockIdx.x;
  T* x = logits + static_cast<int64_t>(n) * vshard;
  MaxSum own{-INFINITY, 0.0f};
  ForRealColumns<kVec>(static_cast<const T*>(x), real, [&](int, float xi) {
    if (xi > own.m) {
      own.s = own.s * expf(own.m - xi) + 1.0f;  // (0 * exp(-inf) = 0 for the first)
      own.m = xi;
    } else {
      own.s += expf(xi - own.m);
    }
  });
  MaxSum* warp_results = DynamicShared<MaxSum>();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  own = WarpMerge(own);
  if (lane == 0) warp_results[warp] = own;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const MaxSum row = WarpMerge(lane < warps ? warp_results[lane] : MaxSum{-INFINITY, 0.0f});
  const int j = targets[n];
  const float target_logit = ToFloat(x[j]);
  const float log_s = logf(row.s);
  const float l = row.m + log_s;
  // Every thread has read its target logit and the row before any writes.
  __syncthreads();
  if (threadIdx.x == 0) {
    lse[n] = l;
    losses[n] = (row.m - target_logit) + log_s;
  }
  WriteRowGrad<kVec>(x, x, vshard, real, j, l, dloss);
}

// The shard's real columns: max(0, min(vshard, vocab_size - vocab_start)).
int RealColumns(int vshard, int64_t vocab_start, int vocab_size) {
  const int64_t r = int64_t{vocab_size} - vocab_start;
  return r <= 0 ? 0 : (r < vshard ? static_cast<int>(r) : vshard);
}

// True when every row starts 16-byte aligned: the kVec16<T> kernels apply.
template <typename T>
bool RowsAligned(int vshard, const T* a, const T* b = nullptr) {
  return vshard % kVec16<T> == 0 && Aligned16(a) && (b == nullptr || Aligned16(b));
}

// The block size for rows of vshard columns read kVec at a time: a thread
// per vector, in whole warps, at most kMaxThreads.
int RowThreads(int vshard, int vec) {
  const int vectors = (vshard + vec - 1) / vec;
  const int warps = (vectors + kWarpSize - 1) / kWarpSize;
  return warps < kMaxWarps ? warps * kWarpSize : kMaxThreads;
}

// The reductions' shared memory: one float per warp.
size_t ReduceSmem(int threads) { return sizeof(float) * static_cast<size_t>(threads / kWarpSize); }

}  // namespace

template <typename T>
cudaError_t LaunchCrossEntropyRowMax(float* row_max, const T* logits, int N, int vshard,
                                     int64_t vocab_start, int vocab_size, cudaStream_t stream) {
  if (N <= 0 || vshard <= 0) return cudaSuccess;
  const int real = RealColumns(vshard, vocab_start, vocab_size);
  const int vec = RowsAligned(vshard, logits) ? kVec16<T> : 1;
  const int threads = RowThreads(vshard, vec);
  if (vec != 1) {
    return Launch<RowMaxKernel<T, kVec16<T>>>(N, threads, ReduceSmem(threads), stream, row_max,
                                              logits, vshard, real);
  }
  return Launch<RowMaxKernel<T, 1>>(N, threads, ReduceSmem(threads), stream, row_max, logits,
                                    vshard, real);
}

template <typename T>
cudaError_t LaunchCrossEntropyPartials(float* sum_exp, float* target_logit, const T* logits,
                                       const int32_t* targets, const float* row_max, int N,
                                       int vshard, int64_t vocab_start, int vocab_size,
                                       cudaStream_t stream) {
  if (N <= 0 || vshard <= 0) return cudaSuccess;
  const int real = RealColumns(vshard, vocab_start, vocab_size);
  const int vec = RowsAligned(vshard, logits) ? kVec16<T> : 1;
  const int threads = RowThreads(vshard, vec);
  if (vec != 1) {
    return Launch<PartialsKernel<T, kVec16<T>>>(N, threads, ReduceSmem(threads), stream, sum_exp,
                                                target_logit, logits, targets, row_max, vshard,
                                                real, vocab_start);
  }
  return Launch<PartialsKernel<T, 1>>(N, threads, ReduceSmem(threads), stream, sum_exp,
                                      target_logit, logits, targets, row_max, vshard, real,
                                      vocab_start);
}

cudaError_t LaunchCrossEntropyLoss(float* losses, float* lse, const float* row_max,
                                   const float* sum_exp, const float* target_logit, int N,
                                   cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  return Launch<LossKernel>((N + kLossThreads - 1) / kLossThreads, kLossThreads, 0, stream, losses,
                            lse, row_max, sum_exp, target_logit, N);
}

template <typename T>
cudaError_t LaunchCrossEntropyBackward(T* dlogits, const T* logits, const int32_t* targets,
                                       const float* lse, int N, int vshard, int64_t vocab_start,
                                       int vocab_size, float dloss, cudaStream_t stream) {
  if (N <= 0 || vshard <= 0) return cudaSuccess;
  const int real = RealColumns(vshard, vocab_start, vocab_size);
  const int vec = RowsAligned(vshard, logits, dlogits) ? kVec16<T> : 1;
  const int threads = RowThreads(vshard, vec);
  if (vec != 1) {
    return Launch<BackwardKernel<T, kVec16<T>>>(N, threads, 0, stream, dlogits, logits, targets,
                                                lse, vshard, real, vocab_start, dloss);
  }
  return Launch<BackwardKernel<T, 1>>(N, threads, 0, stream, dlogits, logits, targets, lse, vshard,
                                      real, vocab_start, dloss);
}

template <typename T>
cudaError_t LaunchCrossEntropyFused(float* losses, float* lse, T* logits, const int32_t* targets,
                                    int N, int vsize, int vocab_size, float dloss,
                                    cudaStream_t stream) {
  if (N <= 0 || vsize <= 0) return cudaSuccess;
  const int real = RealColumns(vsize, 0, vocab_size);
  const int vec = RowsAligned(vsize, logits) ? kVec16<T> : 1;
  const int threads = RowThreads(vsize, vec);
  const size_t smem = sizeof(MaxSum) * static_cast<size_t>(threads / kWarpSize);
  if (vec != 1) {
    return Launch<FusedKernel<T, kVec16<T>>>(N, threads, smem, stream, losses, lse, logits, targets,
                                             vsize, real, dloss);
  }
  return Launch<FusedKernel<T, 1>>(N, threads, smem, stream, losses, lse, logits, targets, vsize,
                                   real, dloss);
}

// The two storage types of the logits (backend.h "Precision").
#define LADDER_CROSS_ENTROPY_INSTANTIATE(T)                                                        \
  template cudaError_t LaunchCrossEntropyRowMax<T>(float*, const T*, int, int, int64_t, int,       \
                                                   cudaStream_t);                                  \
  template cudaError_t LaunchCrossEntropyPartials<T>(float*, float*, const T*, const int32_t*,     \
                                                     const float*, int, int, int64_t, int,         \
                                                     cudaStream_t);                                \
  template cudaError_t LaunchCrossEntropyBackward<T>(T*, const T*, const int32_t*, const float*,   \
                                                     int, int, int64_t, int, float, cudaStream_t); \
  template cudaError_t LaunchCrossEntropyFused<T>(float*, float*, T*, const int32_t*, int, int,    \
                                                  int, float, cudaStream_t);
LADDER_CROSS_ENTROPY_INSTANTIATE(float)
LADDER_CROSS_ENTROPY_INSTANTIATE(__nv_bfloat16)
#undef LADDER_CROSS_ENTROPY_INSTANTIATE

LADDER_KERNELS_END
