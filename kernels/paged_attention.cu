// Paged KV cache for serving: writing new tokens' keys and values into it
// (KvCacheWrite), and attending to it (PagedAttentionForward), with an fp32
// or an int8 cache.
//
// Serving adds a few tokens per sequence per step (one when decoding, a chunk
// when prefilling) to sequences of different lengths whose keys and values
// were computed in earlier steps. They live in a cache of 16-row blocks, so
// no sequence needs contiguous memory: position p of a sequence is row
// block_table[p / 16] * 16 + p % 16. Each new token is a query that walks its
// own sequence's block table.
//
// ---- KvCacheWrite --------------------------------------------------------
// What it fuses: the copy of the k and v parts of each token's qkv row into
// the cache row the scheduler gave it and, for int8, the quantization of each
// (token, head) slice: max|x| over the slice (a warp max), scale = max / 127,
// q = round-to-nearest-even(x / scale), exactly quantize.h's
// QuantizeSymmetric (the same IEEE divide, multiply and clamp, and rintf in
// place of its add-and-subtract rounding, which rounds the same way), so the
// GPU's cache is bit for bit the CPU's.
// Bytes: reads 8*N*C (k and v, fp32); writes 8*N*C (fp32 cache) or
// 2*N*C + 8*N*NH (int8 and scales). No arithmetic to speak of.
// Shape: one warp per (token, head), lane = channel (HS / 32 values each), so
// the slice's max is a warp shuffle reduction and the reads are coalesced.
//
// ---- PagedAttentionForward -----------------------------------------------
// Per (token, head), one row of the softmax with an online max, as the flash
// forward (attention.cu) does, a cache block of 16 positions at a time: the
// block's 16 scores s_p = q . k_p / sqrt(HS), the running max m raised to the
// block's max (rescaling the output once per block rather than at every new
// maximum), then the running sum l of exp(s_p - m) and the output sum
// exp(s_p - m) v_p; O /= l at the end. The same steps in the same order as
// the CPU backend (paged_attention.cc), so the two differ only in how each
// dot product's terms are added and in the last bits of exp.
// int8: the dot is (sum_d q[d] * k[d]) * k_scale and the value weight
// exp(s_p - m) * v_scale, each scale applied once per position.
// Bytes per (token, head) at position P: reads (P + 1) * HS * 2 cache values
// (4 bytes each fp32, 1 byte int8, plus 8 bytes of scales per position) and
// HS query floats; writes HS floats. FLOPs: 4 * (P + 1) * HS. Decoding does
// about one FLOP per byte: bound by memory bandwidth, which is why the int8
// cache (a quarter of the bytes) exists.
// Shape: one warp per (token, head), 4 per block. A lane owns channels lane,
// lane + 32, ... of q and of the output accumulator (both staged in the
// warp's slice of shared memory, so any head size works with one kernel);
// a position's dot product is each lane's partial sum, then a warp sum; the
// 16 scores of a cache block stay in registers, the same in every lane, and
// their 16 value weights pass through shared memory to the loop over
// channels (kept in registers too, they and 16 row addresses spilled). Each
// cache row of a head is HS contiguous values, read by consecutive lanes
// (coalesced). One warp walks all positions of its (token, head): enough
// parallelism for a batch of tokens x heads; a single long sequence would
// want the positions split across warps and the partial softmaxes merged
// (flash-decoding), a later step.
// Determinism: one warp writes each output element, summing positions in
// increasing order; the result does not depend on the batch.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/paged_attention.h"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kWarps = 4;  // (token, head) jobs per block
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kBlock = kKvBlockRows;

// min of two ints (CUDA's integer min() is not in the simulator's subset).
__device__ __forceinline__ int MinInt(int a, int b) { return a < b ? a : b; }

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(int8_t x) { return static_cast<float>(x); }

// ---- KvCacheWrite ------------------------------------------------------------

// One head's HS values x into dst (row-major, contiguous): copied.
__device__ __forceinline__ void StoreSlice(float* dst, float* /*scale*/, const float* x, int HS,
                                           int lane) {
  for (int d = lane; d < HS; d += kWarpSize) dst[d] = x[d];
}

// Quantized as QuantizeSymmetric: scale = max|x| / 127, q = rint(clamp(x / scale)).
__device__ __forceinline__ void StoreSlice(int8_t* dst, float* scale, const float* x, int HS,
                                           int lane) {
  float amax = 0.0f;
  for (int d = lane; d < HS; d += kWarpSize) amax = fmaxf(amax, fabsf(x[d]));
  amax = WarpMax(amax);  // a max is exact in any order
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int d = lane; d < HS; d += kWarpSize) {
    float v = x[d] * inv;
    v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
    dst[d] = static_cast<int8_t>(static_cast<int32_t>(rintf(v)));
  }
  if (lane == 0) *scale = s;
}

// Grid: ceil(N * NH / kWarps) blocks of kThreads; warp = one (token, head).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    KvCacheWriteKernel(T* __restrict__ k_cache, T* __restrict__ v_cache,
                       float* __restrict__ k_scale, float* __restrict__ v_scale,
                       const float* __restrict__ qkv, const int32_t* __restrict__ slots, int N,
                       int S, int NH, int HS) {
  const int job = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (job >= N * NH) return;  // whole warps leave together
  const int n = job / NH, h = job % NH;
  const int slot = slots[n];
  if (slot < 0 || slot >= S) return;  // outside the cache: not written (see the header)
  const int C = NH * HS;
  const float* row = qkv + static_cast<size_t>(n) * 3 * C + h * HS;
  const size_t at = static_cast<size_t>(slot) * C + h * HS;
  const size_t scale_at = static_cast<size_t>(slot) * NH + h;
  StoreSlice(k_cache + at, k_scale != nullptr ? k_scale + scale_at : nullptr, row + C, HS, lane);
  StoreSlice(v_cache + at, v_scale != nullptr ? v_scale + scale_at : nullptr, row + 2 * C, HS,
             lane);
}

// ---- PagedAttentionForward -----------------------------------------------------

// Grid: ceil(N * NH / kWarps) blocks of kThreads; warp = one (token, head).
// Shared memory: per warp, q [HS], the output accumulator o [HS] and the
// value weights of the current cache block w [kBlock].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(float* __restrict__ out, const float* __restrict__ qkv,
                         const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                         const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                         const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq,
                         const int32_t* __restrict__ pos, int N, int S, int NH, int HS,
                         int num_seqs, int max_blocks, float scale) {
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int job = blockIdx.x * kWarps + warp;
  if (job >= N * NH) return;  // whole warps leave together; nothing below syncs the block
  const int n = job / NH, h = job % NH;
  const int C = NH * HS;
  float* dst = out + static_cast<size_t>(n) * C + h * HS;
  const int s = seq[n], p_last = pos[n];
  if (s < 0 || s >= num_seqs || p_last < 0 || p_last / kBlock >= max_blocks) {
    for (int d = lane; d < HS; d += kWarpSize) dst[d] = NAN;  // see the header
    return;
  }
  const int32_t* table = block_tables + static_cast<size_t>(s) * max_blocks;

  float* q = DynamicShared<float>() + warp * (2 * HS + kBlock);
  float* o = q + HS;
  float* w = o + HS;  // the current block's value weights [kBlock]
  const float* q_src = qkv + static_cast<size_t>(n) * 3 * C + h * HS;
  for (int d = lane; d < HS; d += kWarpSize) {
    q[d] = q_src[d];
    o[d] = 0.0f;
  }
  // Each lane reads back only the channels it wrote, so no barrier is needed.

  float m = -INFINITY, l = 0.0f;
  for (int first = 0; first <= p_last; first += kBlock) {
    const int count = MinInt(kBlock, p_last + 1 - first);
    const int block = table[first / kBlock];
    if (block < 0 || (static_cast<int64_t>(block) + 1) * kBlock > S) {
      for (int d = lane; d < HS; d += kWarpSize) dst[d] = NAN;  // see the header
      return;
    }
    const size_t row0 = static_cast<size_t>(block) * kBlock;

    // The block's scores: each lane's share of each dot product, then a warp
    // sum (every lane gets every score).
    float sc[kBlock];
    float block_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      sc[j] = -INFINITY;
      if (j < count) {  // the same in every lane: the warp stays converged
        const T* k = k_cache + (row0 + j) * C + h * HS;
        float part = 0.0f;
        for (int d = lane; d < HS; d += kWarpSize) part += q[d] * ToF(k[d]);
        float dot = WarpSum(part);
        if constexpr (kInt8) dot *= k_scale[(row0 + j) * NH + h];
        sc[j] = dot * scale;
        block_max = fmaxf(block_max, sc[j]);
      }
    }
    // Raise the max once per block (exp(-inf) = 0 on the first block).
    float corr = 1.0f;
    if (block_max > m) {
      corr = expf(m - block_max);
      l *= corr;
      m = block_max;
    }
    // The value weights e_j = exp(s_j - m) (times v_scale for int8) go to the
    // warp's 16 floats of shared memory, lane j writing e_j: the loop over
    // channels below then reads them as broadcasts instead of keeping 16
    // weights and 16 row addresses live in registers.
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      if (j < count) {
        float e = expf(sc[j] - m);
        l += e;
        if constexpr (kInt8) e *= v_scale[(row0 + j) * NH + h];
        if (lane == j) w[j] = e;
      }
    }
    __syncwarp();
    // o = o * corr + sum_j e_j v_j, positions in increasing order.
    const T* v = v_cache + row0 * C + h * HS;
    for (int d = lane; d < HS; d += kWarpSize) {
      float acc = o[d] * corr;
      for (int j = 0; j < count; ++j) acc += w[j] * ToF(v[static_cast<size_t>(j) * C + d]);
      o[d] = acc;
    }
    __syncwarp();  // w is rewritten by the next block
  }
  const float inv = 1.0f / l;
  for (int d = lane; d < HS; d += kWarpSize) dst[d] = o[d] * inv;
}

unsigned Blocks(int N, int NH) {
  return static_cast<unsigned>((static_cast<int64_t>(N) * NH + kWarps - 1) / kWarps);
}

template <typename T>
cudaError_t WriteImpl(T* k_cache, T* v_cache, float* k_scale, float* v_scale, const float* qkv,
                      const int32_t* slots, int N, int S, int NH, int HS, cudaStream_t stream) {
  if (N <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  return Launch<KvCacheWriteKernel<T>>(Blocks(N, NH), kThreads, 0, stream, k_cache, v_cache,
                                       k_scale, v_scale, qkv, slots, N, S, NH, HS);
}

template <typename T>
cudaError_t AttentionImpl(float* out, const float* qkv, const T* k_cache, const T* v_cache,
                          const float* k_scale, const float* v_scale, const int32_t* block_tables,
                          const int32_t* seq, const int32_t* pos, int N, int S, int NH, int HS,
                          int num_seqs, int max_blocks, cudaStream_t stream) {
  if (N <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  constexpr auto kernel = PagedAttentionKernel<T>;
  const size_t smem = sizeof(float) * kWarps * (2 * static_cast<size_t>(HS) + kBlock);
  cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  return Launch<kernel>(Blocks(N, NH), kThreads, smem, stream, out, qkv, k_cache, v_cache, k_scale,
                        v_scale, block_tables, seq, pos, N, S, NH, HS, num_seqs, max_blocks,
                        1.0f / sqrtf(static_cast<float>(HS)));
}

}  // namespace

cudaError_t LaunchKvCacheWriteF32(float* k_cache, float* v_cache, const float* qkv,
                                  const int32_t* slots, int N, int S, int NH, int HS,
                                  cudaStream_t stream) {
  return WriteImpl<float>(k_cache, v_cache, nullptr, nullptr, qkv, slots, N, S, NH, HS, stream);
}

cudaError_t LaunchKvCacheWriteI8(int8_t* k_cache, int8_t* v_cache, float* k_scale, float* v_scale,
                                 const float* qkv, const int32_t* slots, int N, int S, int NH,
                                 int HS, cudaStream_t stream) {
  return WriteImpl<int8_t>(k_cache, v_cache, k_scale, v_scale, qkv, slots, N, S, NH, HS, stream);
}

cudaError_t LaunchPagedAttentionF32(float* out, const float* qkv, const float* k_cache,
                                    const float* v_cache, const int32_t* block_tables,
                                    const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                    int HS, int num_seqs, int max_blocks, cudaStream_t stream) {
  return AttentionImpl<float>(out, qkv, k_cache, v_cache, nullptr, nullptr, block_tables, seq, pos,
                              N, S, NH, HS, num_seqs, max_blocks, stream);
}

cudaError_t LaunchPagedAttentionI8(float* out, const float* qkv, const int8_t* k_cache,
                                   const int8_t* v_cache, const float* k_scale,
                                   const float* v_scale, const int32_t* block_tables,
                                   const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                   int HS, int num_seqs, int max_blocks, cudaStream_t stream) {
  return AttentionImpl<int8_t>(out, qkv, k_cache, v_cache, k_scale, v_scale, block_tables, seq, pos,
                               N, S, NH, HS, num_seqs, max_blocks, stream);
}

LADDER_KERNELS_END
