// Optimizer kernels: the sum of squares behind gradient clipping, and AdamW
// over every parameter tensor in one launch.
//
// SumOfSquares: reads 4n bytes and does n multiply-adds: bound by memory
// bandwidth. It feeds the clip scale that multiplies every gradient, so its
// bits must not depend on scheduling. Two stages, no atomics:
//   stage 1: a grid of B blocks (B fixed by n: ~8 units of work per thread,
//     at most kSumMaxBlocks). Thread t of the grid takes the 4-element units
//     t, t + stride, ... (one 16-byte load each when x is aligned, four
//     scalar loads otherwise: the same adds in the same order), then one of
//     the n % 4 trailing elements. The block's threads meet in a fixed binary
//     tree in shared memory; partials[block] = the block's sum.
//   stage 2: one block adds the B partials in the same fixed way and writes
//     the float result.
// Accumulation is in double (per-thread sums, partials and trees), rounded
// to float once at the end. Why double: it is free here and it is what the
// CPU backend does. The op moves 4 bytes per multiply-add, so even a GPU with
// 1/64-rate FP64 has arithmetic to spare at its memory bandwidth, and an
// H100/H200 runs FP64 at half the FP32 rate. In exchange the sum of millions
// of squares carries no fp32 rounding drift (which grows with the length of
// each thread's run and would make the result depend visibly on B), and the
// float result is almost always the correctly rounded sum, i.e. the CPU's.
//
// AdamW, multi-tensor: a GPT-2 step updates ~150 tensors, most of them small
// (biases, LayerNorm weights). One launch per tensor would be ~150 launches
// of a few microseconds each, many too small to fill the GPU. Instead the
// host writes one descriptor per tensor {param, grad, m, v, n, weight_decay,
// chunk_begin} into a device array (56 bytes each; the Tensor face copies
// them before each launch, a few KB), and one launch walks the
// concatenation of all tensors in chunks of kAdamWChunk elements: block b
// takes chunks b, b + gridDim.x, ...; a chunk lies inside one tensor, found
// by a binary search of chunk_begin (a few reads that stay in L1/L2).
// Per element it reads param, grad, m, v (16 bytes) and writes param, m, v
// (12 bytes), ~15 FLOPs plus a sqrt and a divide: bound by memory bandwidth,
// so each thread moves 16-byte vectors when a tensor's four arrays are
// aligned. The arithmetic is kernels/adamw_element.h, the one definition the
// CPU backend compiles too, written so that no compiler fuses a multiply and
// an add: the GPU, the simulator and the host write the same bits (which is
// what lets optimizer offload move the update to the host unchanged).
//
// Mixed precision: a bf16 model's ops read a bf16 copy of the fp32 master
// weights. AdamW writes it in the same pass (2 more bytes per element, while
// the updated value is still in a register), rounding stochastically with a
// Philox word per element (kernels/philox.cuh) rather than to nearest: an
// update smaller than half a bf16 ulp of its weight (1/256 relative) would
// otherwise never reach the copy, while stochastic rounding passes it on in
// expectation. RoundToBf16 makes the same copy from scratch (after loading
// or resuming), to nearest or with the same random words, so a resumed run
// rebuilds the copy it had.
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/optimizer.h"
#include "kernels/philox.cuh"

LADDER_KERNELS_BEGIN
namespace {

// ---- sum of squares ---------------------------------------------------------------

constexpr int kSumThreads = 256;
constexpr int64_t kSumMaxBlocks = 1024;
constexpr int64_t kSumUnitsPerThread = 8;  // 4-element units, before the block cap

int64_t SumBlocks(int64_t n) {
  const int64_t units = n / 4;
  const int64_t per_block = kSumThreads * kSumUnitsPerThread;
  return std::clamp<int64_t>((units + per_block - 1) / per_block, 1, kSumMaxBlocks);
}

// The block's sum of v (every thread passes one), via a fixed binary tree in
// shared memory (kSumThreads doubles); valid in thread 0.
__device__ __forceinline__ double BlockSumDouble(double v, double* tree) {
  const int t = threadIdx.x;
  tree[t] = v;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (t < half) tree[t] += tree[t + half];
    __syncthreads();
  }
  return tree[0];
}

template <int kVec>
__global__ void __launch_bounds__(kSumThreads)
    SumOfSquaresPartialsKernel(double* __restrict__ partials, const float* __restrict__ x,
                               int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSumThreads;
  const int64_t units = n / 4;
  double acc = 0.0;
  for (int64_t u = tid; u < units; u += stride) {
    float e[4];
    if constexpr (kVec == 4) {
      const Vec<float, 4> xv = LoadVec<4>(x + 4 * u);
#pragma unroll
      for (int k = 0; k < 4; ++k) e[k] = xv.v[k];
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) e[k] = x[4 * u + k];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const double d = e[k];
      acc += d * d;
    }
  }
  const int64_t i = 4 * units + tid;  // the n % 4 trailing elements
  if (i < n) {
    const double d = x[i];
    acc += d * d;
  }
  const double s = BlockSumDouble(acc, DynamicShared<double>());
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumThreads)
    SumOfSquaresFinalKernel(float* __restrict__ out, const double* __restrict__ partials,
                            int num_partials) {
  double acc = 0.0;
  for (int b = threadIdx.x; b < num_partials; b += kSumThreads) acc += partials[b];
  const double s = BlockSumDouble(acc, DynamicShared<double>());
  if (threadIdx.x == 0) *out = static_cast<float>(s);
}

// ---- AdamW --------------------------------------------------------------------------

constexpr int kAdamWThreads = 256;
constexpr int64_t kAdamWMaxBlocks = 2048;

// Aligned16 of common.cuh, for device code (the descriptors live there).
__device__ __forceinline__ bool DeviceAligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The bf16 copy of element i of tensor t after its update to w.
__device__ __forceinline__ void RoundCopy(const AdamWTensor& t, int64_t i, float w,
                                          const AdamWStep& s) {
  const uint64_t index = static_cast<uint64_t>(t.round_offset + i);
  t.param16[i] =
      StochasticRoundBf16(w, PhiloxWord(s.round_seed, kRoundingStream + s.round_step, index));
}

// Elements [begin, end) of one tensor; kVec = 4 needs the tensor's arrays
// 16-byte aligned (begin is a multiple of kAdamWChunk, so the chunk is too).
template <int kVec>
__device__ __forceinline__ void AdamWRange(const AdamWTensor& t, int64_t begin, int64_t end,
                                           const AdamWStep& s) {
  const int64_t nvec = (end - begin) / kVec;
  for (int64_t q = threadIdx.x; q < nvec; q += kAdamWThreads) {
    const int64_t i = begin + q * kVec;
    Vec<float, kVec> w = LoadVec<kVec>(t.param + i);
    const Vec<float, kVec> g = LoadVec<kVec>(t.grad + i);
    Vec<float, kVec> m = LoadVec<kVec>(t.m + i);
    Vec<float, kVec> v = LoadVec<kVec>(t.v + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) AdamWElement(w.v[k], g.v[k], m.v[k], v.v[k], t.weight_decay, s.scalars);
    StoreVec<kVec>(t.param + i, w);
    StoreVec<kVec>(t.m + i, m);
    StoreVec<kVec>(t.v + i, v);
    if (t.param16 != nullptr) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) RoundCopy(t, i + k, w.v[k], s);
    }
  }
  const int64_t i = begin + nvec * kVec + threadIdx.x;  // < kVec trailing elements
  if (i < end) {
    AdamWElement(t.param[i], t.grad[i], t.m[i], t.v[i], t.weight_decay, s.scalars);
    if (t.param16 != nullptr) RoundCopy(t, i, t.param[i], s);
  }
}

__global__ void __launch_bounds__(kAdamWThreads)
    AdamWKernel(const AdamWTensor* __restrict__ tensors, int count, int64_t total_chunks,
                AdamWStep s) {
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    // The last tensor whose first chunk is <= chunk (empty tensors own no
    // chunk and share chunk_begin with the next one, so they are skipped).
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tensors[mid].chunk_begin <= chunk) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const AdamWTensor t = tensors[lo];
    const int64_t begin = (chunk - t.chunk_begin) * kAdamWChunk;
    const int64_t end = begin + kAdamWChunk < t.n ? begin + kAdamWChunk : t.n;
    const bool aligned = DeviceAligned16(t.param) && DeviceAligned16(t.grad) &&
                         DeviceAligned16(t.m) && DeviceAligned16(t.v);
    if (aligned) {
      AdamWRange<4>(t, begin, end, s);
    } else {
      AdamWRange<1>(t, begin, end, s);
    }
  }
}

// ---- bf16 copies ----------------------------------------------------------------------

constexpr int kRoundThreads = 256;
constexpr int64_t kRoundMaxBlocks = 4096;

template <bool kStochastic>
__global__ void __launch_bounds__(kRoundThreads)
    RoundToBf16Kernel(__nv_bfloat16* __restrict__ dst, const float* __restrict__ src, int64_t n,
                      uint64_t seed, uint64_t step, int64_t offset) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRoundThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRoundThreads + threadIdx.x; i < n;
       i += stride) {
    if constexpr (kStochastic) {
      const uint64_t index = static_cast<uint64_t>(offset + i);
      dst[i] = StochasticRoundBf16(src[i], PhiloxWord(seed, kRoundingStream + step, index));
    } else {
      dst[i] = __float2bfloat16_rn(src[i]);
    }
  }
}

}  // namespace

cudaError_t LaunchRoundToBf16(__nv_bfloat16* dst, const float* src, int64_t n, bool stochastic,
                              uint64_t seed, uint64_t step, int64_t offset, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int blocks =
      static_cast<int>(std::min(kRoundMaxBlocks, (n + kRoundThreads - 1) / kRoundThreads));
  return stochastic ? Launch<RoundToBf16Kernel<true>>(blocks, kRoundThreads, 0, stream, dst, src, n,
                                                      seed, step, offset)
                    : Launch<RoundToBf16Kernel<false>>(blocks, kRoundThreads, 0, stream, dst, src,
                                                       n, seed, step, offset);
}

size_t SumOfSquaresScratchDoubles(int64_t n) {
  return static_cast<size_t>(SumBlocks(n < 0 ? 0 : n));
}

cudaError_t LaunchSumOfSquares(float* out, const float* x, int64_t n, double* scratch,
                               cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  const int blocks = static_cast<int>(SumBlocks(n));
  constexpr size_t smem = sizeof(double) * kSumThreads;
  cudaError_t err =
      Aligned16(x)
          ? Launch<SumOfSquaresPartialsKernel<4>>(blocks, kSumThreads, smem, stream, scratch, x, n)
          : Launch<SumOfSquaresPartialsKernel<1>>(blocks, kSumThreads, smem, stream, scratch, x, n);
  if (err != cudaSuccess) return err;
  return Launch<SumOfSquaresFinalKernel>(1, kSumThreads, smem, stream, out,
                                         static_cast<const double*>(scratch), blocks);
}

int64_t PlanAdamWChunks(AdamWTensor* tensors, int count) {
  int64_t chunks = 0;
  for (int i = 0; i < count; ++i) {
    tensors[i].chunk_begin = chunks;
    chunks += (std::max<int64_t>(tensors[i].n, 0) + kAdamWChunk - 1) / kAdamWChunk;
  }
  return chunks;
}

cudaError_t LaunchAdamW(const AdamWTensor* tensors, int count, int64_t total_chunks,
                        const AdamWStep& step, cudaStream_t stream) {
  if (count <= 0 || total_chunks <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min(total_chunks, kAdamWMaxBlocks));
  return Launch<AdamWKernel>(blocks, kAdamWThreads, 0, stream, tensors, count, total_chunks, step);
}

LADDER_KERNELS_END
