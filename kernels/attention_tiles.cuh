// The tiles of the scalar flash-attention kernels (kernels/attention_flash.cuh)
// and the device helpers they use: one launch shape over one shared-memory
// layout, for causal self-attention (kernels/attention.cu) and attention by
// positions (kernels/attention_part.cu, context parallelism's ring steps).
// attention.cu's opening comment explains the layout and its reasons
// (lane = key, a warp per 8 rows, odd row strides); only those kernel files
// include this header.
#pragma once

#include <cmath>

#include "kernels/common.cuh"

LADDER_KERNELS_BEGIN

inline constexpr int kTile = 32;              // queries and keys per tile (= the warp size)
inline constexpr int kWarps = 4;              // warps per flash block
inline constexpr int kRows = kTile / kWarps;  // rows of a tile per warp
inline constexpr int kThreads = kWarps * kWarpSize;
inline constexpr unsigned kMaxGridY = 65535;  // CUDA's limit on gridDim.y (tiles: T < 2 million)

static_assert(kTile == kWarpSize, "a tile row is one warp wide");

// Shared-memory row stride of a tile read with lane = row: odd, so the 32
// lanes' words of one column fall into 32 different banks.
__host__ __device__ __forceinline__ int TileStride(int HS) { return HS | 1; }

// Copies rows [t0, t0 + kTile) of a [T, HS] head slice (row stride ld_src
// elements in global memory) into an fp32 tile of stride ld, widening each
// element; rows at or past T are zero. Consecutive threads read consecutive
// channels of a row (coalesced).
template <typename Storage>
__device__ __forceinline__ void LoadTile(float* __restrict__ tile, int ld,
                                         const Storage* __restrict__ src, size_t ld_src, int t0,
                                         int T, int HS) {
  for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
    const int r = idx / HS, c = idx % HS;
    const int t = t0 + r;
    tile[r * ld + c] = t < T ? ToFloat(src[static_cast<size_t>(t) * ld_src + c]) : 0.0f;
  }
}

// The forward's score product for one warp: s[i] = a_i . b_lane over HS
// channels, for the warp's kRows rows a_i of Q and the lane's row of K (row
// stride ld for both). a is read at one address per warp (a broadcast), b at
// 32 rows of one column (odd stride: no bank conflicts).
__device__ __forceinline__ void ScoreDots(const float* __restrict__ a, const float* __restrict__ b,
                                          int ld, int HS, int lane, float (&s)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = 0.0f;
  const float* b_row = b + lane * ld;
  for (int d = 0; d < HS; ++d) {
    const float bd = b_row[d];
#pragma unroll
    for (int i = 0; i < kRows; ++i) s[i] += a[i * ld + d] * bd;
  }
}

// The backward's two score products for one warp: for the warp's kRows rows
// a_i and c_i (row stride ld) and the lane's row b and e (stride ld),
//   s[i] = a_i . b_lane   and   dp[i] = c_i . e_lane   over HS channels.
// The dQ kernels call it with (Q, dO) against (K, V): S = Q K^T, dP = dO V^T;
// the dK/dV kernels with (K, V) against (Q, dO): the transposes S^T and dP^T.
__device__ __forceinline__ void ScoreAndGradDots(const float* __restrict__ a,
                                                 const float* __restrict__ c,
                                                 const float* __restrict__ b,
                                                 const float* __restrict__ e, int ld, int HS,
                                                 int lane, float (&s)[kRows], float (&dp)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = dp[i] = 0.0f;
  for (int d = 0; d < HS; ++d) {
    const float bd = b[lane * ld + d], ed = e[lane * ld + d];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      s[i] += a[i * ld + d] * bd;
      dp[i] += c[i * ld + d] * ed;
    }
  }
}

// One step of the online softmax for one query row spread over the warp
// (lane = key): folds the lane's scaled score sc (taken only where `valid`)
// into the row's running max m and sum l (of exp(score - m) over the keys so
// far, the same in every lane), sets corr to the factor exp(old m - new m)
// that rescales what was accumulated under the old max, and returns the
// lane's unnormalized probability exp(sc - new m) (0 where not valid). Until
// the row has seen an allowed key m stays -inf, l 0 and corr 1: there is
// nothing to rescale, and exp(-inf - -inf) would be NaN.
__device__ __forceinline__ float OnlineSoftmaxStep(float sc, bool valid, float& m, float& l,
                                                   float& corr) {
  const float m_new = fmaxf(m, WarpMax(valid ? sc : -INFINITY));
  corr = m_new == -INFINITY ? 1.0f : expf(m - m_new);
  const float p = valid ? expf(sc - m_new) : 0.0f;
  l = l * corr + WarpSum(p);
  m = m_new;
  return p;
}

// acc[row0 + i] += sum_k a[i][k] * tile[k] for the warp's kRows rows
// row0 .. row0 + 7 of an accumulator acc [kTile][HS] in shared memory (O, dQ,
// dK or dV), with a [kRows][kTile] the warp's rows of P or dS and tile
// [kTile][ld] (V, K, dO or Q). With kRescale each acc row is first multiplied
// by keep[i] (the online softmax's corr). Lane owns columns lane, lane + 32,
// ...: it adds the kTile terms of a column in increasing k in registers,
// then stores once.
template <bool kRescale>
__device__ __forceinline__ void AddTileProducts(float* acc, int row0, const float* a,
                                                const float* tile, int ld, int HS, int lane,
                                                const float* keep = nullptr) {
  for (int col = lane; col < HS; col += kWarpSize) {
    float r[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      r[i] = acc[(row0 + i) * HS + col];
      if constexpr (kRescale) r[i] *= keep[i];
    }
    for (int k = 0; k < kTile; ++k) {
      const float t = tile[k * ld + col];
#pragma unroll
      for (int i = 0; i < kRows; ++i) r[i] += a[i * kTile + k] * t;
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) acc[(row0 + i) * HS + col] = r[i];
  }
}

// The dK/dV kernels' two products in one pass over the columns, each as
// AddTileProducts<false>: dV += P^T dO (acc1, a1 = P, tile1 = dO) and
// dK += (scale * dS)^T Q (acc2, a2 = scale * dS, tile2 = Q), the warp's keys
// being rows row0 .. row0 + 7, the sums over the tile's queries in order.
__device__ __forceinline__ void AddTileProductPair(float* acc1, const float* a1, const float* tile1,
                                                   float* acc2, const float* a2, const float* tile2,
                                                   int row0, int ld, int HS, int lane) {
  for (int col = lane; col < HS; col += kWarpSize) {
    float r1[kRows], r2[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      r1[i] = acc1[(row0 + i) * HS + col];
      r2[i] = acc2[(row0 + i) * HS + col];
    }
    for (int k = 0; k < kTile; ++k) {
      const float t1 = tile1[k * ld + col], t2 = tile2[k * ld + col];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        r1[i] += a1[i * kTile + k] * t1;
        r2[i] += a2[i * kTile + k] * t2;
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      acc1[(row0 + i) * HS + col] = r1[i];
      acc2[(row0 + i) * HS + col] = r2[i];
    }
  }
}

// The backward's D of query `row`: dO_row . O_row over the head's HS
// channels, summed across the warp (every lane gets it); 0 for a row past T.
// dout_head and out_head point at the head's channels of row 0 (stride C).
template <typename Storage>
__device__ __forceinline__ float RowDoutDotOut(const Storage* __restrict__ dout_head,
                                               const Storage* __restrict__ out_head, int row, int T,
                                               int C, int HS, int lane) {
  float part = 0.0f;
  if (row < T) {
    for (int col = lane; col < HS; col += kWarpSize) {
      part += ToFloat(dout_head[static_cast<size_t>(row) * C + col]) *
              ToFloat(out_head[static_cast<size_t>(row) * C + col]);
    }
  }
  return WarpSum(part);
}

__device__ __forceinline__ void ZeroRows(float* __restrict__ p, int n) {
  for (int idx = threadIdx.x; idx < n; idx += blockDim.x) p[idx] = 0.0f;
}

// Shared memory (bytes) of the three kernel shapes, by what they hold
// (floats): the forward Q, K [kTile][ld] | V, O [kTile][HS] | P [kTile][kTile];
// the dQ pass Q, dO, K, V [kTile][ld] | dQ [kTile][HS] | dS [kTile][kTile];
// the dK/dV pass K, V, Q, dO [kTile][ld] | dK, dV [kTile][HS] |
// P, dS [kTile][kTile] | D, lse [kTile].
inline size_t FlashForwardSmem(int HS) {
  return sizeof(float) * (2 * kTile * TileStride(HS) + 2 * kTile * HS + kTile * kTile);
}
inline size_t FlashBackwardDqSmem(int HS) {
  return sizeof(float) * (4 * kTile * TileStride(HS) + kTile * HS + kTile * kTile);
}
inline size_t FlashBackwardDkDvSmem(int HS) {
  return sizeof(float) *
         (4 * kTile * TileStride(HS) + 2 * kTile * HS + 2 * kTile * kTile + 2 * kTile);
}

LADDER_KERNELS_END
