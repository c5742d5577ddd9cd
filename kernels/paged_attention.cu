// Paged KV cache for serving: writing new tokens' keys and values into it
// (KvCacheWrite), and attending to it (PagedAttentionForward), with an fp32
// or an int8 cache. The activations (qkv in, the attention's output) are
// fp32 or bf16 (A below): a bf16 value is widened exactly on load and a
// result rounded once on store, so a bf16 call computes exactly what the
// fp32 call computes on the widened inputs, then rounds its output.
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
// Bytes: reads 8*N*C (k and v, fp32; 4*N*C bf16); writes 8*N*C (fp32
// cache) or 2*N*C + 8*N*NH (int8 and scales). No arithmetic to speak of.
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
// HS query values; writes HS values (4 bytes each, 2 for bf16). FLOPs:
// 4 * (P + 1) * HS. Decoding does about one FLOP per byte: bound by memory
// bandwidth, which is why the int8 cache (a quarter of the bytes) exists.
// Split-K (flash-decoding): a decode step has few query tokens (one per
// sequence), so one warp per (token, head) is a few dozen warps for a whole
// GPU, each walking a long sequence alone. The positions are therefore cut
// into splits of kSplitRows = 128 (8 cache blocks); one warp per (token,
// head, split) runs the loop above over its split only and leaves its
// partial result, the unnormalized o_j with its max m_j and sum l_j, in
// scratch; then a combine kernel merges a token's splits by their
// log-sum-exp: M = max m_j, w_j = exp(m_j - M), L = sum l_j w_j,
// O = (sum o_j w_j) / L, splits in increasing order. A token of at most
// kSplitRows positions has one split, which writes O = o / l directly, the
// same operations as without splits. The split size is fixed, never chosen
// from the batch, so a token's result depends only on its own sequence:
// the same bits whatever else is batched with it (continuous batching
// stays deterministic). Extra traffic: (HS + 2) floats written and read
// per split, against 2 * 128 * HS cache values read per split.
// Shape: one warp per (token, head, split), 4 per block. A lane owns channels lane,
// lane + 32, ... of q and of the output accumulator (both staged in the
// warp's slice of shared memory, so any head size works with one kernel);
// a position's dot product is each lane's partial sum, then a warp sum; the
// 16 scores of a cache block stay in registers, the same in every lane, and
// their 16 value weights pass through shared memory to the loop over
// channels (kept in registers too, they and 16 row addresses spilled). Each
// cache row of a head is HS contiguous values, read by consecutive lanes
// (coalesced).
// Determinism: one warp writes each partial or output element, summing
// positions (and splits) in increasing order; the result does not depend on
// the batch.
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
constexpr int kSplitRows = kPagedSplitBlocks * kBlock;  // positions per split

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(int8_t x) { return static_cast<float>(x); }

// ---- KvCacheWrite ------------------------------------------------------------

// One head's HS values x into dst (row-major, contiguous): copied.
template <typename A>
__device__ __forceinline__ void StoreSlice(float* dst, float* /*scale*/, const A* x, int HS,
                                           int lane) {
  for (int d = lane; d < HS; d += kWarpSize) dst[d] = ToFloat(x[d]);
}

// Quantized as QuantizeSymmetric: scale = max|x| / 127, q = rint(clamp(x / scale)).
template <typename A>
__device__ __forceinline__ void StoreSlice(int8_t* dst, float* scale, const A* x, int HS,
                                           int lane) {
  float amax = 0.0f;
  for (int d = lane; d < HS; d += kWarpSize) amax = fmaxf(amax, fabsf(ToFloat(x[d])));
  amax = WarpMax(amax);  // a max is exact in any order
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int d = lane; d < HS; d += kWarpSize) {
    float v = ToFloat(x[d]) * inv;
    v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
    dst[d] = static_cast<int8_t>(static_cast<int32_t>(rintf(v)));
  }
  if (lane == 0) *scale = s;
}

// Grid: ceil(N * NH / kWarps) blocks of kThreads; warp = one (token, head).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    KvCacheWriteKernel(T* __restrict__ k_cache, T* __restrict__ v_cache,
                       float* __restrict__ k_scale, float* __restrict__ v_scale,
                       const A* __restrict__ qkv, const int32_t* __restrict__ slots, int N, int S,
                       int NH, int HS) {
  const int job = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (job >= N * NH) return;  // whole warps leave together
  const int n = job / NH, h = job % NH;
  const int slot = slots[n];
  if (slot < 0 || slot >= S) return;  // outside the cache: not written (see the header)
  const int C = NH * HS;
  const A* row = qkv + static_cast<size_t>(n) * 3 * C + h * HS;
  const size_t at = static_cast<size_t>(slot) * C + h * HS;
  const size_t scale_at = static_cast<size_t>(slot) * NH + h;
  StoreSlice(k_cache + at, k_scale != nullptr ? k_scale + scale_at : nullptr, row + C, HS, lane);
  StoreSlice(v_cache + at, v_scale != nullptr ? v_scale + scale_at : nullptr, row + 2 * C, HS,
             lane);
}

// ---- PagedAttentionForward -----------------------------------------------------

// Whether token n's sequence and position lie inside the tables (else its
// output is NaN: see the header).
__device__ __forceinline__ bool ValidQuery(int s, int p_last, int num_seqs, int max_blocks) {
  return s >= 0 && s < num_seqs && p_last >= 0 && p_last / kBlock < max_blocks;
}

// Grid: ceil(N * NH * splits / kWarps) blocks of kThreads; warp = one
// (token, head, split), split fastest. Shared memory: per warp, q [HS], the
// output accumulator o [HS] and the value weights of the current cache block
// w [kBlock]. A token of one split writes out; of more, each split writes
// part_o [HS] and part_ml (m, l) at its index ((n * NH + h) * splits + j).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(A* __restrict__ out, float* __restrict__ part_o,
                         float* __restrict__ part_ml, const A* __restrict__ qkv,
                         const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                         const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                         const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq,
                         const int32_t* __restrict__ pos, int N, int S, int NH, int HS,
                         int num_seqs, int max_blocks, int splits, float scale) {
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t job = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (job >= static_cast<int64_t>(N) * NH * splits) return;  // whole warps leave together
  const int split = static_cast<int>(job % splits);
  const int n = static_cast<int>(job / splits / NH), h = static_cast<int>(job / splits % NH);
  const int C = NH * HS;
  A* dst = out + static_cast<size_t>(n) * C + h * HS;
  const int s = seq[n], p_last = pos[n];
  if (!ValidQuery(s, p_last, num_seqs, max_blocks)) {
    if (split == 0) {
      for (int d = lane; d < HS; d += kWarpSize) dst[d] = FromFloat<A>(NAN);  // see the header
    }
    return;
  }
  const int count_splits = p_last / kSplitRows + 1;
  if (split >= count_splits) return;  // past this token's positions
  const bool direct = count_splits == 1;
  const size_t part = static_cast<size_t>(job);
  const int32_t* table = block_tables + static_cast<size_t>(s) * max_blocks;

  float* q = DynamicShared<float>() + warp * (2 * HS + kBlock);
  float* o = q + HS;
  float* w = o + HS;  // the current block's value weights [kBlock]
  const A* q_src = qkv + static_cast<size_t>(n) * 3 * C + h * HS;
  for (int d = lane; d < HS; d += kWarpSize) {
    q[d] = ToFloat(q_src[d]);
    o[d] = 0.0f;
  }
  // Each lane reads back only the channels it wrote, so no barrier is needed.

  float m = -INFINITY, l = 0.0f;
  const int split_last = MinInt(p_last, (split + 1) * kSplitRows - 1);
  for (int first = split * kSplitRows; first <= split_last; first += kBlock) {
    const int count = MinInt(kBlock, split_last + 1 - first);
    const int block = table[first / kBlock];
    if (block < 0 || (static_cast<int64_t>(block) + 1) * kBlock > S) {
      // See the header: NaN out, directly or through the combine (a NaN l
      // makes the merged sum NaN).
      if (direct) {
        for (int d = lane; d < HS; d += kWarpSize) dst[d] = FromFloat<A>(NAN);
      } else if (lane == 0) {
        part_ml[2 * part] = NAN;
        part_ml[2 * part + 1] = NAN;
      }
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
  if (direct) {
    const float inv = 1.0f / l;
    for (int d = lane; d < HS; d += kWarpSize) dst[d] = FromFloat<A>(o[d] * inv);
    return;
  }
  float* po = part_o + part * HS;
  for (int d = lane; d < HS; d += kWarpSize) po[d] = o[d];
  if (lane == 0) {
    part_ml[2 * part] = m;
    part_ml[2 * part + 1] = l;
  }
}

// Grid: ceil(N * NH / kWarps) blocks of kThreads; warp = one (token, head)
// of more than one split: merges its splits' partials into out.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    CombineSplitsKernel(A* __restrict__ out, const float* __restrict__ part_o,
                        const float* __restrict__ part_ml, const int32_t* __restrict__ seq,
                        const int32_t* __restrict__ pos, int N, int NH, int HS, int num_seqs,
                        int max_blocks, int splits) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int job = blockIdx.x * kWarps + warp;
  if (job >= N * NH) return;
  const int n = job / NH, h = job % NH;
  const int p_last = pos[n];
  if (!ValidQuery(seq[n], p_last, num_seqs, max_blocks)) return;  // NaN written already
  const int count = p_last / kSplitRows + 1;
  if (count == 1) return;  // written directly
  const size_t first = static_cast<size_t>(job) * splits;
  float M = -INFINITY;
  for (int j = 0; j < count; ++j) M = fmaxf(M, part_ml[2 * (first + j)]);
  float L = 0.0f;
  for (int j = 0; j < count; ++j) {
    L += part_ml[2 * (first + j) + 1] * expf(part_ml[2 * (first + j)] - M);
  }
  const float inv = 1.0f / L;
  A* dst = out + static_cast<size_t>(n) * NH * HS + h * HS;
  for (int d = lane; d < HS; d += kWarpSize) {
    float acc = 0.0f;
    for (int j = 0; j < count; ++j) {
      acc += part_o[(first + j) * HS + d] * expf(part_ml[2 * (first + j)] - M);
    }
    dst[d] = FromFloat<A>(acc * inv);
  }
}

unsigned Blocks(int N, int NH) {
  return static_cast<unsigned>((static_cast<int64_t>(N) * NH + kWarps - 1) / kWarps);
}

template <typename T, typename A>
cudaError_t WriteImpl(T* k_cache, T* v_cache, float* k_scale, float* v_scale, const A* qkv,
                      const int32_t* slots, int N, int S, int NH, int HS, cudaStream_t stream) {
  if (N <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  return Launch<KvCacheWriteKernel<T, A>>(Blocks(N, NH), kThreads, 0, stream, k_cache, v_cache,
                                          k_scale, v_scale, qkv, slots, N, S, NH, HS);
}

template <typename T, typename A>
cudaError_t AttentionImpl(A* out, float* scratch, const A* qkv, const T* k_cache, const T* v_cache,
                          const float* k_scale, const float* v_scale, const int32_t* block_tables,
                          const int32_t* seq, const int32_t* pos, int N, int S, int NH, int HS,
                          int num_seqs, int max_blocks, cudaStream_t stream) {
  if (N <= 0 || NH <= 0 || HS <= 0 || max_blocks <= 0) return cudaSuccess;
  const int splits = PagedSplits(max_blocks);
  float* part_o = scratch;
  float* part_ml = scratch + static_cast<size_t>(N) * NH * splits * HS;
  constexpr auto kernel = PagedAttentionKernel<T, A>;
  const size_t smem = sizeof(float) * kWarps * (2 * static_cast<size_t>(HS) + kBlock);
  cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  const int64_t warps = static_cast<int64_t>(N) * NH * splits;
  err = Launch<kernel>(static_cast<unsigned>((warps + kWarps - 1) / kWarps), kThreads, smem, stream,
                       out, part_o, part_ml, qkv, k_cache, v_cache, k_scale, v_scale, block_tables,
                       seq, pos, N, S, NH, HS, num_seqs, max_blocks, splits,
                       1.0f / sqrtf(static_cast<float>(HS)));
  if (err != cudaSuccess || splits == 1) return err;
  return Launch<CombineSplitsKernel<A>>(Blocks(N, NH), kThreads, 0, stream, out, part_o, part_ml,
                                        seq, pos, N, NH, HS, num_seqs, max_blocks, splits);
}

}  // namespace

template <typename A>
cudaError_t LaunchKvCacheWriteF32(float* k_cache, float* v_cache, const A* qkv,
                                  const int32_t* slots, int N, int S, int NH, int HS,
                                  cudaStream_t stream) {
  return WriteImpl<float, A>(k_cache, v_cache, nullptr, nullptr, qkv, slots, N, S, NH, HS, stream);
}

template <typename A>
cudaError_t LaunchKvCacheWriteI8(int8_t* k_cache, int8_t* v_cache, float* k_scale, float* v_scale,
                                 const A* qkv, const int32_t* slots, int N, int S, int NH, int HS,
                                 cudaStream_t stream) {
  return WriteImpl<int8_t, A>(k_cache, v_cache, k_scale, v_scale, qkv, slots, N, S, NH, HS, stream);
}

template <typename A>
cudaError_t LaunchPagedAttentionF32(A* out, float* scratch, const A* qkv, const float* k_cache,
                                    const float* v_cache, const int32_t* block_tables,
                                    const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                    int HS, int num_seqs, int max_blocks, cudaStream_t stream) {
  return AttentionImpl<float, A>(out, scratch, qkv, k_cache, v_cache, nullptr, nullptr,
                                 block_tables, seq, pos, N, S, NH, HS, num_seqs, max_blocks,
                                 stream);
}

template <typename A>
cudaError_t LaunchPagedAttentionI8(A* out, float* scratch, const A* qkv, const int8_t* k_cache,
                                   const int8_t* v_cache, const float* k_scale,
                                   const float* v_scale, const int32_t* block_tables,
                                   const int32_t* seq, const int32_t* pos, int N, int S, int NH,
                                   int HS, int num_seqs, int max_blocks, cudaStream_t stream) {
  return AttentionImpl<int8_t, A>(out, scratch, qkv, k_cache, v_cache, k_scale, v_scale,
                                  block_tables, seq, pos, N, S, NH, HS, num_seqs, max_blocks,
                                  stream);
}

#define LADDER_PAGED_INSTANTIATE(A)                                                               \
  template cudaError_t LaunchKvCacheWriteF32<A>(float*, float*, const A*, const int32_t*, int,    \
                                                int, int, int, cudaStream_t);                     \
  template cudaError_t LaunchKvCacheWriteI8<A>(int8_t*, int8_t*, float*, float*, const A*,        \
                                               const int32_t*, int, int, int, int, cudaStream_t); \
  template cudaError_t LaunchPagedAttentionF32<A>(                                                \
      A*, float*, const A*, const float*, const float*, const int32_t*, const int32_t*,           \
      const int32_t*, int, int, int, int, int, int, cudaStream_t);                                \
  template cudaError_t LaunchPagedAttentionI8<A>(                                                 \
      A*, float*, const A*, const int8_t*, const int8_t*, const float*, const float*,             \
      const int32_t*, const int32_t*, const int32_t*, int, int, int, int, int, int, cudaStream_t);
LADDER_PAGED_INSTANTIATE(float)
LADDER_PAGED_INSTANTIATE(__nv_bfloat16)
#undef LADDER_PAGED_INSTANTIATE

LADDER_KERNELS_END
