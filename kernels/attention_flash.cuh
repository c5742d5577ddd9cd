// The scalar flash-attention kernels, forward and backward, written once for
// both of their uses:
//   kernels/attention.cu       causal self-attention: queries and keys are
//                              the same T tokens of one qkv (CausalMask);
//   kernels/attention_part.cu  attention by positions, one block of context
//                              parallelism's ring (PositionMask).
// A Mask says which (query, key) pairs count, which tile pairs a block
// visits, in what order blocks take their tiles, and whether results are
// stored or combined with what the outputs hold. Everything else (the
// tiles, the online softmax, the products, the shared-memory layout, the
// launch shape) is one text. attention.cu's opening comment explains the
// design (what the kernels fuse, lane = key, a warp per 8 rows, odd row
// strides, why the backward is two kernels without atomics);
// attention_part.cu's the positions, the merge and the bytes of a ring
// step. Only those two files include this header.
//
// The Mask contract (device functions of a small struct passed by value):
//   kCombine            false: each kernel stores its results. true: the
//                       forward merges out/lse by log-sum-exp when asked
//                       (`merge`), the backward adds into the gradients,
//                       and a block that meets no allowed pair writes
//                       nothing.
//   QueryTile()         the query tile of this block of the forward or dQ
//                       kernel (grid y).
//   KeyTilesEnd(i0)     those kernels visit key tiles j0 = 0, 32, ... below it.
//   QueryTilesBegin(j0) the dK/dV kernel visits query tiles from it to Tq.
//   QueryTileMax(i0, lane), KeyTileMin(j0, lane)   a summary of a tile that
//                       the block computes once (by positions: its largest
//                       query or smallest key position);
//   SkipKeyTile(j0, query_max, lane), SkipQueryTile(i0, key_min, lane)
//                       whether a tile pair has no allowed pair. Both are
//                       the same in every lane and warp, so a block skips
//                       a tile pair together and meets every barrier.
//   Sees(q, k)          query q sees key k (false for q >= Tq or k >= Tk).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention_tiles.cuh"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN

// ---- masks ----------------------------------------------------------------------

// Causal self-attention: query i sees key j iff j <= i. A query tile meets
// the key tiles up to the diagonal, a key tile the query tiles from the
// diagonal on; every pair visited has an allowed pair. Causal work is
// uneven (the last query tile sees every key tile), so the forward and dQ
// blocks take their tiles last to first, the longest first; the dK/dV
// blocks go first to last (key tile 0 is seen by every query tile).
struct CausalMask {
  int T;
  static constexpr bool kCombine = false;
  __device__ __forceinline__ int QueryTile() const { return gridDim.y - 1 - blockIdx.y; }
  __device__ __forceinline__ int KeyTilesEnd(int i0) const { return MinInt(i0 + kTile, T); }
  __device__ __forceinline__ int QueryTilesBegin(int j0) const { return j0; }
  __device__ __forceinline__ int QueryTileMax(int, int) const { return 0; }
  __device__ __forceinline__ int KeyTileMin(int, int) const { return 0; }
  __device__ __forceinline__ bool SkipKeyTile(int, int, int) const { return false; }
  __device__ __forceinline__ bool SkipQueryTile(int, int, int) const { return false; }
  __device__ __forceinline__ bool Sees(int q, int k) const { return q < T && k <= q; }
};

__device__ __forceinline__ int WarpMaxInt(int v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const int o = __shfl_xor_sync(kFullMask, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

__device__ __forceinline__ int WarpMinInt(int v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const int o = __shfl_xor_sync(kFullMask, v, offset);
    v = o < v ? o : v;
  }
  return v;
}

// By positions: query i sees key j iff k_pos[j] <= q_pos[i]. A rank's tokens
// are not contiguous (an early and a late chunk of each sequence), so every
// tile pair is a candidate, skipped when it has no allowed pair
// (attention_part.cu says what that costs, and why positions are read where
// they are compared).
struct PositionMask {
  const int32_t* __restrict__ q_pos;
  const int32_t* __restrict__ k_pos;
  int Tq, Tk;
  static constexpr bool kCombine = true;
  __device__ __forceinline__ int QueryTile() const { return blockIdx.y; }
  __device__ __forceinline__ int KeyTilesEnd(int) const { return Tk; }
  __device__ __forceinline__ int QueryTilesBegin(int) const { return 0; }
  // A tile pair is skipped when the key tile's smallest position is past
  // the query tile's largest (lane = row; rows past the ends do not count).
  __device__ __forceinline__ int QueryTileMax(int i0, int lane) const {
    const int q = i0 + lane;
    return WarpMaxInt(q < Tq ? q_pos[q] : INT_MIN);
  }
  __device__ __forceinline__ int KeyTileMin(int j0, int lane) const {
    const int k = j0 + lane;
    return WarpMinInt(k < Tk ? k_pos[k] : INT_MAX);
  }
  __device__ __forceinline__ bool SkipKeyTile(int j0, int query_max, int lane) const {
    return KeyTileMin(j0, lane) > query_max;
  }
  __device__ __forceinline__ bool SkipQueryTile(int i0, int key_min, int lane) const {
    return QueryTileMax(i0, lane) < key_min;
  }
  __device__ __forceinline__ bool Sees(int q, int k) const {
    return q < Tq && k < Tk && k_pos[k] <= q_pos[q];
  }
};

// ---- forward ----------------------------------------------------------------------

// Grid (B*NH, query tiles), kThreads threads. Shared memory (floats):
// Q, K [kTile][ld] | V, O [kTile][HS] | P [kWarps][kRows][kTile].
// Reads the q part of q_qkv [B,Tq,3C] and the k, v parts of kv_qkv
// [B,Tk,3C]; writes out [B,Tq,C] and lse [B,NH,Tq] (merged into them with
// Mask::kCombine and `merge`).
template <typename Storage, typename Mask>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(Storage* __restrict__ out, float* __restrict__ lse,
                       const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                       Mask mask, int Tq, int Tk, int NH, int HS, float scale, bool merge) {
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = mask.QueryTile() * kTile;
  const int C = NH * HS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const Storage* q_base = q_qkv + static_cast<size_t>(b) * Tq * C3 + h * HS;
  const Storage* k_base = kv_qkv + static_cast<size_t>(b) * Tk * C3 + C + h * HS;  // v at +C
  const int ld = TileStride(HS);
  float* sQ = DynamicShared<float>();
  float* sK = sQ + kTile * ld;
  float* sV = sK + kTile * ld;
  float* sO = sV + kTile * HS;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* sP = sO + kTile * HS + warp * kRows * kTile;  // this warp's 8 rows of P

  LoadTile(sQ, ld, q_base, C3, i0, Tq, HS);
  ZeroRows(sO, kTile * HS);  // a row may see no key of some tiles, or of any

  // Running statistics of the warp's 8 query rows, the same in every lane.
  // Rows past Tq take part in every step (so every warp meets every
  // barrier) but see no key.
  const int row0 = i0 + warp * kRows;
  float m[kRows], l[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  const int query_max = mask.QueryTileMax(i0, lane);

  for (int j0 = 0; j0 < mask.KeyTilesEnd(i0); j0 += kTile) {
    if (mask.SkipKeyTile(j0, query_max, lane)) continue;  // every pair of the tiles masked
    __syncthreads();  // the previous tile's K/V are no longer read
    LoadTile(sK, ld, k_base, C3, j0, Tk, HS);
    LoadTile(sV, HS, k_base + C, C3, j0, Tk, HS);
    __syncthreads();

    // S = Q K^T for the warp's 8 rows; lane = key.
    float s[kRows];
    ScoreDots(sQ + warp * kRows * ld, sK, ld, HS, lane, s);

    // Online softmax, one row per step, the row spread over the warp.
    const int key = j0 + lane;
    float corr[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool valid = mask.Sees(row0 + i, key);
      sP[i * kTile + lane] = OnlineSoftmaxStep(s[i] * scale, valid, m[i], l[i], corr[i]);
    }
    __syncwarp();
    AddTileProducts<true>(sO, warp * kRows, sP, sV, HS, HS, lane, corr);  // O = O corr + P V
    __syncwarp();  // P is rewritten by the next tile
  }

  // This block's out2 = O / l and lse2 = m + log(l) (0 and -inf for a row
  // that saw no key: l = 0), stored, or merged into (out1, lse1). The warp
  // wrote its rows of O itself.
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + i;
    if (row >= Tq) continue;
    Storage* dst = out + (static_cast<size_t>(b) * Tq + row) * C + h * HS;
    float* lse_at = lse + static_cast<size_t>(bh) * Tq + row;
    const bool seen = l[i] > 0.0f;
    const float lse2 = seen ? m[i] + logf(l[i]) : -INFINITY;
    const float inv = seen ? 1.0f / l[i] : 0.0f;
    // With an earlier result to mix in: out = out1 * w1 + out2 * w2. Else out2.
    bool mix = false;
    float lse_new = lse2, w1 = 0.0f, w2 = 0.0f;
    if (Mask::kCombine && merge) {
      if (!seen) continue;  // nothing allowed here: out1 and lse1 stay as they are
      const float lse1 = *lse_at;
      __syncwarp();  // every lane has read lse1 before lane 0 overwrites it
      mix = lse1 != -INFINITY;
      if (mix) {  // logaddexp: the larger term is exp(0) = 1, the smaller one <= 1
        lse_new = fmaxf(lse1, lse2) + log1pf(expf(-fabsf(lse1 - lse2)));
        w1 = expf(lse1 - lse_new);
        w2 = expf(lse2 - lse_new);
      }
    }
    for (int col = lane; col < HS; col += kWarpSize) {
      const float o2 = seen ? sO[(warp * kRows + i) * HS + col] * inv : 0.0f;
      dst[col] = FromFloat<Storage>(mix ? ToFloat(dst[col]) * w1 + o2 * w2 : o2);
    }
    if (lane == 0) *lse_at = lse_new;
  }
}

// ---- backward: dQ over query tiles ---------------------------------------------

// Grid (B*NH, query tiles), kThreads threads. Shared memory (floats):
// Q, dO, K, V [kTile][ld] | dQ [kTile][HS] | dS [kWarps][kRows][kTile].
// Writes (or with Mask::kCombine adds) dq into the q part of dq_qkv.
template <typename Storage, typename Mask>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardDqKernel(Storage* dq_qkv, const Storage* __restrict__ dout,
                          const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                          const Storage* __restrict__ out, const float* __restrict__ lse, Mask mask,
                          int Tq, int Tk, int NH, int HS, float scale) {
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = mask.QueryTile() * kTile;
  const int C = NH * HS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const Storage* q_base = q_qkv + static_cast<size_t>(b) * Tq * C3 + h * HS;
  const Storage* k_base = kv_qkv + static_cast<size_t>(b) * Tk * C3 + C + h * HS;  // v at +C
  const Storage* dout_base = dout + static_cast<size_t>(b) * Tq * C + h * HS;
  const Storage* out_base = out + static_cast<size_t>(b) * Tq * C + h * HS;
  const int ld = TileStride(HS);
  float* sQ = DynamicShared<float>();
  float* sdO = sQ + kTile * ld;
  float* sK = sdO + kTile * ld;
  float* sV = sK + kTile * ld;
  float* sdQ = sV + kTile * ld;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* sS = sdQ + kTile * HS + warp * kRows * kTile;

  LoadTile(sQ, ld, q_base, C3, i0, Tq, HS);
  LoadTile(sdO, ld, dout_base, C, i0, Tq, HS);
  ZeroRows(sdQ, kTile * HS);

  // D and lse of the warp's rows (rows past Tq: zero dO, so D = 0, and no key).
  const int row0 = i0 + warp * kRows;
  float D[kRows], L[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + i;
    D[i] = RowDoutDotOut(dout_base, out_base, row, Tq, C, HS, lane);
    L[i] = row < Tq ? lse[static_cast<size_t>(bh) * Tq + row] : 0.0f;
  }
  const int query_max = mask.QueryTileMax(i0, lane);

  bool any = false;  // some tile pair had an allowed pair (uniform over the block)
  for (int j0 = 0; j0 < mask.KeyTilesEnd(i0); j0 += kTile) {
    if (mask.SkipKeyTile(j0, query_max, lane)) continue;
    any = true;
    __syncthreads();  // Q/dO loaded (first tile); the previous K/V no longer read
    LoadTile(sK, ld, k_base, C3, j0, Tk, HS);
    LoadTile(sV, ld, k_base + C, C3, j0, Tk, HS);
    __syncthreads();

    // S = Q K^T and dP = dO V^T for the warp's 8 rows; lane = key.
    float s[kRows], dp[kRows];
    ScoreAndGradDots(sQ + warp * kRows * ld, sdO + warp * kRows * ld, sK, sV, ld, HS, lane, s, dp);
    const int key = j0 + lane;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float p = mask.Sees(row0 + i, key) ? expf(s[i] * scale - L[i]) : 0.0f;
      sS[i * kTile + lane] = p * (dp[i] - D[i]) * scale;  // scale * dS
    }
    __syncwarp();
    AddTileProducts<false>(sdQ, warp * kRows, sS, sK, ld, HS, lane);  // dQ += scale dS K
    __syncwarp();
  }
  if (Mask::kCombine && !any) return;  // adds nothing: leave dq_qkv as it is

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + i;
    if (row >= Tq) continue;
    Storage* dst = dq_qkv + (static_cast<size_t>(b) * Tq + row) * C3 + h * HS;
    for (int col = lane; col < HS; col += kWarpSize) {
      const float dq = sdQ[(warp * kRows + i) * HS + col];
      dst[col] = FromFloat<Storage>(Mask::kCombine ? ToFloat(dst[col]) + dq : dq);
    }
  }
}

// ---- backward: dK, dV over key tiles -------------------------------------------

// Grid (B*NH, key tiles), kThreads threads; warp w owns keys j0 + 8w .. + 7,
// lane = query of the current query tile. Shared memory (floats):
// K, V, Q, dO [kTile][ld] | dK, dV [kTile][HS] | P, dS [kWarps][kRows][kTile] |
// D, lse [kTile]. Writes (or with Mask::kCombine adds) dk, dv into the k, v
// parts of dkv_qkv.
template <typename Storage, typename Mask>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardDkDvKernel(Storage* dkv_qkv, const Storage* __restrict__ dout,
                            const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                            const Storage* __restrict__ out, const float* __restrict__ lse,
                            Mask mask, int Tq, int Tk, int NH, int HS, float scale) {
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j0 = blockIdx.y * kTile;
  const int C = NH * HS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const Storage* q_base = q_qkv + static_cast<size_t>(b) * Tq * C3 + h * HS;
  const Storage* k_base = kv_qkv + static_cast<size_t>(b) * Tk * C3 + C + h * HS;  // v at +C
  const Storage* dout_base = dout + static_cast<size_t>(b) * Tq * C + h * HS;
  const Storage* out_base = out + static_cast<size_t>(b) * Tq * C + h * HS;
  const int ld = TileStride(HS);
  float* sK = DynamicShared<float>();
  float* sV = sK + kTile * ld;
  float* sQ = sV + kTile * ld;
  float* sdO = sQ + kTile * ld;
  float* sdK = sdO + kTile * ld;
  float* sdV = sdK + kTile * HS;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* sP = sdV + kTile * HS + warp * kRows * kTile;
  float* sS = sdV + kTile * HS + kTile * kTile + warp * kRows * kTile;
  float* sD = sdV + kTile * HS + 2 * kTile * kTile;
  float* sL = sD + kTile;

  LoadTile(sK, ld, k_base, C3, j0, Tk, HS);
  LoadTile(sV, ld, k_base + C, C3, j0, Tk, HS);
  ZeroRows(sdK, 2 * kTile * HS);  // dK and dV

  const int key0 = j0 + warp * kRows;  // the warp's first key
  const int key_min = mask.KeyTileMin(j0, lane);
  bool any = false;  // as in the dQ kernel
  for (int i0 = mask.QueryTilesBegin(j0); i0 < Tq; i0 += kTile) {
    if (mask.SkipQueryTile(i0, key_min, lane)) continue;  // every pair of the tiles masked
    any = true;
    __syncthreads();  // the previous query tile is no longer read
    LoadTile(sQ, ld, q_base, C3, i0, Tq, HS);
    LoadTile(sdO, ld, dout_base, C, i0, Tq, HS);
    // D and lse of the tile's queries: warp w computes rows 8w .. 8w + 7.
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = warp * kRows + i, row = i0 + r;
      const float D = RowDoutDotOut(dout_base, out_base, row, Tq, C, HS, lane);
      if (lane == 0) {
        sD[r] = D;
        sL[r] = row < Tq ? lse[static_cast<size_t>(bh) * Tq + row] : 0.0f;
      }
    }
    __syncthreads();

    // S^T = K Q^T and dP^T = V dO^T for the warp's 8 keys; lane = query.
    float s[kRows], dp[kRows];
    ScoreAndGradDots(sK + warp * kRows * ld, sV + warp * kRows * ld, sQ, sdO, ld, HS, lane, s, dp);
    const int query = i0 + lane;
    const float Dq = sD[lane], Lq = sL[lane];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float p = mask.Sees(query, key0 + i) ? expf(s[i] * scale - Lq) : 0.0f;
      sP[i * kTile + lane] = p;
      sS[i * kTile + lane] = p * (dp[i] - Dq) * scale;  // scale * dS
    }
    __syncwarp();
    // dV += P^T dO and dK += (scale * dS)^T Q for the warp's keys; the sums
    // run over the tile's 32 queries in order.
    AddTileProductPair(sdV, sP, sdO, sdK, sS, sQ, warp * kRows, ld, HS, lane);
    __syncwarp();
  }
  if (Mask::kCombine && !any) return;

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int key = key0 + i;
    if (key >= Tk) continue;
    Storage* dst = dkv_qkv + (static_cast<size_t>(b) * Tk + key) * C3 + C + h * HS;  // dv at +C
    for (int col = lane; col < HS; col += kWarpSize) {
      const float dk = sdK[(warp * kRows + i) * HS + col];
      const float dv = sdV[(warp * kRows + i) * HS + col];
      dst[col] = FromFloat<Storage>(Mask::kCombine ? ToFloat(dst[col]) + dk : dk);
      dst[C + col] = FromFloat<Storage>(Mask::kCombine ? ToFloat(dst[C + col]) + dv : dv);
    }
  }
}

LADDER_KERNELS_END
