// Causal self-attention forward and backward on tensor cores (bf16 storage,
// head sizes 64 and 128): FlashAttention-2 with mma.sync m16n8k16 (bf16
// inputs, fp32 accumulators), ldmatrix and cp.async from
// kernels/tensor_core.cuh. Contract and launchers:
// kernels/flash_attention_tc.h; the math and the scalar kernels they replace
// for these shapes: kernels/attention.cu. The forward is described first;
// the backward (two kernels, dK/dV and dQ) after it, under "backward".
//
// ---- what it fuses --------------------------------------------------------
// S = scale * Q K^T, the causal mask, the softmax (online: a running row max
// m and sum l, the output rescaled by exp(m_old - m_new) when the max grows)
// and O = P V, per (query tile, head, batch) in one block: S and P live only
// in registers, nothing T x T touches memory. At the end out = O / l and
// lse = m + log(l).
//
// ---- bytes and FLOPs ------------------------------------------------------
// HBM: qkv is read once, 6*B*T*C bytes (3C bf16 per token); out is written
// once, 2*B*T*C bytes, and lse, 4*B*NH*T bytes: 8 bytes per (B,T,C) element
// plus the lse. The K and V tiles that several query tiles of one head read
// again (a head's K and V are 2*T*HS bf16: 256 KiB at T = 1024, HS = 64)
// come from L2. FLOPs: the two products over the causal half of the T x T
// square, 2*B*NH*T^2*HS; the tensor cores execute whole 64 x 64 diagonal
// tiles, so they run 2*B*NH*HS*T*(T + 64), the part above the diagonal masked.
//
// ---- tiles, and why -------------------------------------------------------
// A block is 4 warps (128 threads) and owns 64 query rows of one (b, h):
// grid (B*NH, query tiles), longest (last) tile first as in attention.cu.
// Warp w owns query rows 16w .. 16w+15, one mma's m. Its Q rows are loaded
// once (cp.async, then ldmatrix.x4) and kept as HS/16 A-fragments (16 or 32
// registers). The key/value loop walks 64-key tiles from 0 to the diagonal
// (tiles entirely above the diagonal are never visited, and only the
// diagonal tile is masked); K and V tiles reach shared memory by cp.async,
// double-buffered: tile j+1 is in flight while tile j is multiplied.
// Per key tile a warp computes its 16 x 64 block of S as 8 n-tiles of
// m16n8 (32 fp32 registers; K is the "col" B operand, read by ldmatrix.x4
// from its [key][channel] rows, two n-tiles per load), applies the online
// softmax to it in registers (a row is spread over the 4 lanes of a quad:
// max and sum by __shfl_xor_sync over lanes 1 and 2), converts P to bf16
// A-fragments in place (the accumulator layout of n-tiles 2k and 2k+1 is
// the A layout of the k-th 16-key step: no shuffle, no shared memory) and
// adds P V into its 16 x HS output accumulator (HS/8 n-tiles, 32 or 64
// registers; V is the row-major [key][channel] B operand, read by
// ldmatrix.x4.trans, two n-tiles per load). 64 keys per tile: the S block
// and the P fragments stay within the register budget at HS = 128 (about
// 170 registers of the 255 a 128-thread block may use), while the tile is
// large enough that each K/V element brought to shared memory feeds 64
// query rows, and the double buffer fits (HS = 128: 5 tiles of 64 rows,
// 85 KiB, two blocks per SM; HS = 64: 45 KiB, within the default 48 KiB).
// Shared rows are padded by 8 bf16 (16 bytes): HS + 8 elements per row,
// 144 or 272 bytes, i.e. 4 banks (mod 32) between consecutive rows, so the
// 8 row addresses of one ldmatrix 8x8 matrix (16 bytes each, same column)
// cover all 32 banks once: no bank conflicts, and every row stays 16-byte
// aligned for cp.async and ldmatrix. (Padding rather than an XOR swizzle:
// simpler addressing, at the price of 1/9 or 1/17 more shared memory.)
// Rows past T are never read from global memory: their shared rows are
// zero-filled with plain stores instead of cp.async (zero V rows keep
// 0 * V = 0 for masked keys; zero K and Q rows give finite scores), and
// their outputs are never written.
//
// ---- numerics, against the scalar kernel ----------------------------------
// Scores: bf16 x bf16 products are exact in fp32 and summed in fp32 by the
// mma, as the scalar kernel sums them (only the order differs). Softmax in
// fp32 (expf), l summed from the fp32 p. The difference: P is rounded to
// bf16 (PackBf16x2, nearest even) before the P V mma, as FlashAttention
// does, because the mma takes bf16 operands. Each weight p then carries a
// relative error of at most 2^-8, so an output element moves by up to
// 2^-8 * sum_j P[i,j] |V[j,c]| (normalized P) before its one final rounding
// to bf16 on store; the scalar kernel keeps P in fp32. lse is unaffected
// (l sums the unrounded p), so the backward, which recomputes P in fp32
// from lse, sees the same statistics either way.
//
// ---- backward: what it fuses, and how it splits ----------------------------
// From qkv, dO, O and the forward's lse, recompute P = exp(scale Q K^T - lse)
// tile by tile (never stored) and form dV = P^T dO, dP = dO V^T,
// dS = P (dP - D) with D_i = dO_i . O_i, dK = scale dS^T Q, dQ = scale dS K.
// dK/dV sum over queries and dQ over keys; rather than atomics (whose order,
// and so whose bits, vary run to run) two kernels each own one side, as
// attention.cu's scalar backward does: FlashBackwardKvTcKernel per 64-key
// tile (warp = 16 keys, the loop over query tiles from the diagonal down,
// the products transposed so the keys are the mma's rows) and
// FlashBackwardQTcKernel per 64-query tile (the forward's layout plus dP and
// dS). Both recompute S and P, and D (a dot product per row, from dO and O
// read once per tile): the price of determinism is computing S and dP
// twice, 2 of the backward's 7 products (FlashAttention-2, with atomics for
// dQ, does 5).
// P and dS are rounded to bf16 as the left operands of their products,
// exactly as the forward rounds P; every sum stays fp32. Registers (ptxas,
// sm_90): dK/dV 174 at HS = 64, 252 at HS = 128 (query tiles of 32 there,
// so the 16 x 32 S and dP blocks fit beside the two 16 x 128
// accumulators); dQ 135 and 169; no spills. Q, K, V and dO fragments are
// read from shared memory with ldmatrix at each use rather than kept in
// registers, for the same reason.
// Bytes: each kernel reads qkv's K and V (or Q) once per tile pair, like the
// forward, plus dO and O; dqkv is written once, 6 bytes per (B,T,C)
// element. FLOPs: 4 products over the causal half in the dK/dV kernel and 3
// in the dQ kernel, 7 B NH T^2 HS in all (the forward's 2 B NH T^2 HS,
// times 3.5).
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/flash_attention_tc.h"
#include "kernels/launch.cuh"
#include "kernels/tensor_core.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kTcTile = 64;  // query rows per block = keys per key tile
constexpr int kTcWarps = 4;  // 16 query rows each
constexpr int kTcThreads = kTcWarps * kWarpSize;
constexpr int kPad = 8;                  // bf16 per shared row beyond HS (16 bytes)
constexpr unsigned kTcMaxGridY = 65535;  // gridDim.y limit: query tiles

static_assert(kTcTile == 16 * kTcWarps, "one mma m-tile (16 rows) per warp");

// Shared row stride in bf16, elements of one 64-row tile, and the block's
// shared memory: Q | K0 | V0 | K1 | V1.
__host__ __device__ constexpr int Ld(int hs) { return hs + kPad; }
__host__ __device__ constexpr int TileElems(int hs) { return kTcTile * Ld(hs); }
__host__ __device__ constexpr size_t TcSmem(int hs) {
  return 5 * static_cast<size_t>(TileElems(hs)) * sizeof(uint16_t);
}

// Starts copying rows [t0, t0 + kRows) of a [T, kHS] head slice (row stride
// ld_src elements) into a shared tile: 16-byte pieces by cp.async for rows <
// T, zeros stored directly for rows >= T (never read from global memory).
template <int kHS, int kRows = kTcTile>
__device__ __forceinline__ void LoadTileAsync(uint16_t* tile, const uint16_t* __restrict__ src,
                                              size_t ld_src, int t0, int T) {
  constexpr int kPieces = kHS / 8;  // 16-byte pieces per row
  for (int c = static_cast<int>(threadIdx.x); c < kRows * kPieces; c += kTcThreads) {
    const int row = c / kPieces, col = (c % kPieces) * 8;
    uint16_t* dst = tile + row * Ld(kHS) + col;
    if (t0 + row < T) {
      CpAsync16(dst, src + static_cast<size_t>(t0 + row) * ld_src + col);
    } else {
      StoreVec<4>(reinterpret_cast<uint32_t*>(dst), Vec<uint32_t, 4>{});
    }
  }
}

// Max and sum of v over the 4 lanes of a quad (the lanes holding one row).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

// Grid (B*NH, query tiles), kTcThreads threads, TcSmem(kHS) bytes.
template <int kHS>
__global__ void __launch_bounds__(kTcThreads)
    FlashForwardTcKernel(uint16_t* __restrict__ out, float* __restrict__ lse,
                         const uint16_t* __restrict__ qkv, int T, int NH, float scale) {
  constexpr int kLdS = Ld(kHS);
  constexpr int kKSteps = kHS / 16;      // k-steps of Q K^T (channels)
  constexpr int kONTiles = kHS / 8;      // n-tiles of O (channels)
  constexpr int kSNTiles = kTcTile / 8;  // n-tiles of S (keys)

  const int bh = static_cast<int>(blockIdx.x), b = bh / NH, h = bh % NH;
  const int qt = static_cast<int>(gridDim.y - 1 - blockIdx.y);  // longest tile first
  const int i0 = qt * kTcTile;
  const int C = NH * kHS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const uint16_t* q_base = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;
  const uint16_t* k_base = q_base + C;
  const uint16_t* v_base = q_base + 2 * C;

  uint16_t* sQ = DynamicShared<uint16_t>();
  uint16_t* sKV = sQ + TileElems(kHS);  // stage s: K at 2s, V at 2s + 1 tiles
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;    // mma groupID, threadID_in_group
  const int mi = lane >> 3, mj = lane & 7;  // ldmatrix: matrix and row this lane addresses

  LoadTileAsync<kHS>(sQ, q_base, C3, i0, T);
  LoadTileAsync<kHS>(sKV, k_base, C3, 0, T);
  LoadTileAsync<kHS>(sKV + TileElems(kHS), v_base, C3, 0, T);
  CpAsyncCommit();

  uint32_t qf[kKSteps][4];
  float o[kONTiles][4];
#pragma unroll
  for (int n = 0; n < kONTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Statistics of rows g and g + 8 of the warp's 16 (index r), in units of
  // the scaled score; l is this lane's share (its 16 of the 64 columns of
  // each tile), summed over the quad at the end.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row_local = warp * 16 + g;  // in the tile; + 8 for r = 1

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) {
      uint16_t* next = sKV + ((kt + 1) & 1) * 2 * TileElems(kHS);
      LoadTileAsync<kHS>(next, k_base, C3, (kt + 1) * kTcTile, T);
      LoadTileAsync<kHS>(next + TileElems(kHS), v_base, C3, (kt + 1) * kTcTile, T);
    }
    CpAsyncCommit();   // possibly empty: "the most recent group" stays tile kt + 1
    CpAsyncWait<1>();  // tile kt (and, at kt = 0, Q) has landed for this thread
    __syncthreads();   // ... and for every thread
    if (kt == 0) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        LdMatrixX4(qf[ks], sQ + (warp * 16 + (lane & 15)) * kLdS + ks * 16 + 8 * (lane >> 4));
      }
    }
    const uint16_t* sK = sKV + (kt & 1) * 2 * TileElems(kHS);
    const uint16_t* sV = sK + TileElems(kHS);

    // S = Q K^T: 16 x 64 per warp. ldmatrix.x4 matrices: keys 0-7/ch 0-7,
    // keys 0-7/ch 8-15, keys 8-15/ch 0-7, keys 8-15/ch 8-15 of a 16-key pair.
    float s[kSNTiles][4];
#pragma unroll
    for (int n = 0; n < kSNTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kSNTiles / 2; ++np) {
        uint32_t r[4];
        LdMatrixX4(r, sK + (np * 16 + mj + 8 * (mi >> 1)) * kLdS + ks * 16 + 8 * (mi & 1));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        MmaBf16_16816(s[2 * np], qf[ks], b0, s[2 * np]);
        MmaBf16_16816(s[2 * np + 1], qf[ks], b1, s[2 * np + 1]);
      }
    }

    // Scale, mask (the diagonal tile only: key > query; keys >= T lie only
    // there, beyond every valid row), online softmax per row.
    const bool diagonal = kt == qt;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kSNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key_local = n * 8 + 2 * t + (e & 1);
        float x = s[n][e] * scale;
        if (diagonal && key_local > row_local + 8 * (e >> 1)) x = -INFINITY;
        s[n][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // Key 0 of the tile is unmasked for every row, so m_new is finite and
      // the first tile's corr is exp(-inf) = 0.
      const float m_new = fmaxf(m[r], QuadMax(mx[r]));
      corr[r] = expf(m[r] - m_new);
      m[r] = m_new;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < kSNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = expf(s[n][e] - m[e >> 1]);  // masked: exp(-inf) = 0
        s[n][e] = p;
        l[e >> 1] += p;
      }
    }
#pragma unroll
    for (int n = 0; n < kONTiles; ++n) {
      o[n][0] *= corr[0], o[n][1] *= corr[0];
      o[n][2] *= corr[1], o[n][3] *= corr[1];
    }

    // O += P V. The 16-key step kk's A fragment is S n-tiles 2kk, 2kk+1:
    // a[0] = P[g][2t..], a[1] = P[g+8][2t..], a[2] = P[g][8+2t..], a[3] = P[g+8][8+2t..].
    // V by ldmatrix.x4.trans: lanes 0-15 rows (keys) 0-15 at channel 16np,
    // lanes 16-31 the same rows at channel 16np + 8: b of n-tiles 2np, 2np+1.
#pragma unroll
    for (int kk = 0; kk < kSNTiles / 2; ++kk) {
      const uint32_t a[4] = {PackBf16x2(s[2 * kk][0], s[2 * kk][1]),
                             PackBf16x2(s[2 * kk][2], s[2 * kk][3]),
                             PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < kONTiles / 2; ++np) {
        uint32_t r[4];
        LdMatrixX4Trans(r, sV + (kk * 16 + (lane & 15)) * kLdS + np * 16 + 8 * (lane >> 4));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        MmaBf16_16816(o[2 * np], a, b0, o[2 * np]);
        MmaBf16_16816(o[2 * np + 1], a, b1, o[2 * np + 1]);
      }
    }
    __syncthreads();  // this stage is refilled at iteration kt + 1
  }

  // out = O / l (bf16 pairs: lane holds channels 8n + 2t, +1 of rows g, g+8),
  // lse = m + log(l). Rows at or past T are not written.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = i0 + row_local + 8 * r;
    const float sum = QuadSum(l[r]);  // every lane takes part in the shuffle
    if (row >= T) continue;
    const float inv = 1.0f / sum;
    uint32_t* dst =
        reinterpret_cast<uint32_t*>(out + (static_cast<size_t>(b) * T + row) * C + h * kHS + 2 * t);
#pragma unroll
    for (int n = 0; n < kONTiles; ++n) {
      dst[4 * n] = PackBf16x2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    if (t == 0) lse[static_cast<size_t>(bh) * T + row] = m[r] + logf(sum);
  }
}

template <int kHS>
cudaError_t LaunchTc(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH,
                     cudaStream_t stream) {
  constexpr auto kernel = FlashForwardTcKernel<kHS>;
  cudaError_t err = AllowDynamicShared<kernel>(TcSmem(kHS));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(B * NH),
                  static_cast<unsigned>((T + kTcTile - 1) / kTcTile));
  if (grid.y > kTcMaxGridY) return cudaErrorInvalidValue;
  return Launch<kernel>(grid, kTcThreads, TcSmem(kHS), stream, reinterpret_cast<uint16_t*>(out),
                        lse, reinterpret_cast<const uint16_t*>(qkv), T, NH,
                        1.0f / sqrtf(static_cast<float>(kHS)));
}

// ---- backward -----------------------------------------------------------------

// Query rows per tile of the dK/dV kernel: 64 at HS = 64; 32 at HS = 128,
// where the warp's two 16 x HS accumulators (dK, dV: 128 registers) leave
// room for only 16 x 32 blocks of S and dP.
__host__ __device__ constexpr int BwdQueryRows(int hs) { return hs == 64 ? 64 : 32; }
// Shared memory: dK/dV: K | V | 2 stages of (Q | dO) | 2 stages of (D | L);
// dQ: Q | dO | 2 stages of (K | V) | D | L.
__host__ __device__ constexpr size_t TcBwdKvSmem(int hs) {
  return (2 * static_cast<size_t>(kTcTile) + 4 * BwdQueryRows(hs)) * Ld(hs) * sizeof(uint16_t) +
         4 * static_cast<size_t>(BwdQueryRows(hs)) * sizeof(float);
}
__host__ __device__ constexpr size_t TcBwdQSmem(int hs) {
  return 6 * static_cast<size_t>(TileElems(hs)) * sizeof(uint16_t) + 2 * kTcTile * sizeof(float);
}

// D = dO . O (fp32, channels in a fixed order) and L = lse of the kRows
// query rows from q0, into sD and sL. Rows past T get D = 0 and L = +inf, so
// their P = exp(s - L) is 0 and they add nothing. Every thread of the block
// takes part (kTcThreads / kRows consecutive lanes per row).
template <int kHS, int kRows>
__device__ __forceinline__ void RowStats(float* sD, float* sL, const uint16_t* __restrict__ dout,
                                         const uint16_t* __restrict__ out,
                                         const float* __restrict__ lse, int ld, int q0, int T) {
  constexpr int kParts = kTcThreads / kRows;
  const int row = static_cast<int>(threadIdx.x) / kParts,
            part = static_cast<int>(threadIdx.x) % kParts;
  const int q = q0 + row;
  float d = 0.0f;
  if (q < T) {
    const uint32_t* o = reinterpret_cast<const uint32_t*>(out + static_cast<size_t>(q) * ld);
    const uint32_t* g = reinterpret_cast<const uint32_t*>(dout + static_cast<size_t>(q) * ld);
    for (int c = part; c < kHS / 2; c += kParts) {
      const float2 a = UnpackBf16x2(o[c]), b = UnpackBf16x2(g[c]);
      d += a.x * b.x + a.y * b.y;
    }
  }
#pragma unroll
  for (int offset = 1; offset < kParts; offset *= 2) d += __shfl_xor_sync(kFullMask, d, offset);
  if (part == 0) {
    sD[row] = d;
    sL[row] = q < T ? lse[q] : INFINITY;
  }
}

// acc[n] += A * B for the kN n-tiles of one 16-row A fragment, B read by
// ldmatrix.x4 from a shared tile stored [n][k] (the "col" operand: K in
// Q K^T), k-step ks: rows n0 .. n0 + 8 kN of `tile`.
template <int kN>
__device__ __forceinline__ void MmaNK(float (*acc)[4], const uint32_t a[4], const uint16_t* tile,
                                      int ld, int ks, int lane) {
  const int mi = lane >> 3, mj = lane & 7;
#pragma unroll
  for (int np = 0; np < kN / 2; ++np) {
    uint32_t r[4];
    LdMatrixX4(r, tile + (np * 16 + mj + 8 * (mi >> 1)) * ld + ks * 16 + 8 * (mi & 1));
    const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
    MmaBf16_16816(acc[2 * np], a, b0, acc[2 * np]);
    MmaBf16_16816(acc[2 * np + 1], a, b1, acc[2 * np + 1]);
  }
}

// acc[n] += A * B for kN n-tiles, B read by ldmatrix.x4.trans from a shared
// tile stored row-major [k][n] (V in P V), the 16 k-rows from k0.
template <int kN>
__device__ __forceinline__ void MmaKN(float (*acc)[4], const uint32_t a[4], const uint16_t* tile,
                                      int ld, int k0, int lane) {
#pragma unroll
  for (int np = 0; np < kN / 2; ++np) {
    uint32_t r[4];
    LdMatrixX4Trans(r, tile + (k0 + (lane & 15)) * ld + np * 16 + 8 * (lane >> 4));
    const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
    MmaBf16_16816(acc[2 * np], a, b0, acc[2 * np]);
    MmaBf16_16816(acc[2 * np + 1], a, b1, acc[2 * np + 1]);
  }
}

// The A fragment of 16-wide k-step kk from an accumulator block of n-tiles
// (n-tiles 2kk and 2kk + 1), rounded to bf16: P or dS as the next product's
// left operand, in place (the forward's P V step).
__device__ __forceinline__ void AccToA(uint32_t a[4], const float (*acc)[4], int kk) {
  a[0] = PackBf16x2(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = PackBf16x2(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = PackBf16x2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = PackBf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// dK and dV of one 64-key tile of one (b, h): grid (B*NH, key tiles), key
// tile 0 (the most query tiles) first. Warp w owns keys 16w .. 16w + 15 and
// accumulates their dK and dV (16 x HS each) in registers over the query
// tiles from the tile's first key to T, Q and dO double-buffered by
// cp.async. Per query tile, transposed so the warp's keys are the mma's m:
//   S^T = K Q^T, P^T = exp(scale S^T - L) (0 where key > query),
//   dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q,
// P^T and dS^T rounded to bf16 as the products' left operand. dK is scaled
// once at the end.
template <int kHS>
__global__ void __launch_bounds__(kTcThreads)
    FlashBackwardKvTcKernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                            const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ out,
                            const float* __restrict__ lse, int T, int NH, float scale) {
  constexpr int kBQ = BwdQueryRows(kHS);
  constexpr int kLdS = Ld(kHS);
  constexpr int kKSteps = kHS / 16;  // channel k-steps of S^T and dP^T
  constexpr int kCN = kHS / 8;       // channel n-tiles of dK and dV
  constexpr int kQN = kBQ / 8;       // query n-tiles of S^T and dP^T
  constexpr int kQElems = kBQ * kLdS;

  const int bh = static_cast<int>(blockIdx.x), b = bh / NH, h = bh % NH;
  const int k0 = static_cast<int>(blockIdx.y) * kTcTile;
  const int C = NH * kHS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const uint16_t* q_base = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;
  const uint16_t* do_base = dout + static_cast<size_t>(b) * T * C + h * kHS;
  const uint16_t* o_base = out + static_cast<size_t>(b) * T * C + h * kHS;
  const float* lse_bh = lse + static_cast<size_t>(bh) * T;

  uint16_t* sK = DynamicShared<uint16_t>();
  uint16_t* sV = sK + TileElems(kHS);
  uint16_t* sQdO = sV + TileElems(kHS);  // stage s: Q at 2s, dO at 2s + 1 tiles
  float* sStat = reinterpret_cast<float*>(sQdO + 4 * kQElems);  // stage s: D, L at 2s kBQ
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;

  const int qt_first = k0 / kBQ, qt_end = (T + kBQ - 1) / kBQ;
  LoadTileAsync<kHS>(sK, q_base + C, C3, k0, T);
  LoadTileAsync<kHS>(sV, q_base + 2 * C, C3, k0, T);
  LoadTileAsync<kHS, kBQ>(sQdO, q_base, C3, qt_first * kBQ, T);
  LoadTileAsync<kHS, kBQ>(sQdO + kQElems, do_base, C, qt_first * kBQ, T);
  CpAsyncCommit();
  RowStats<kHS, kBQ>(sStat, sStat + kBQ, do_base, o_base, lse_bh, C, qt_first * kBQ, T);

  float dk[kCN][4], dv[kCN][4];
#pragma unroll
  for (int n = 0; n < kCN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  }
  const int key = k0 + warp * 16 + g;  // the lane's first key; + 8 for e >= 2

  for (int qt = qt_first; qt < qt_end; ++qt) {
    const int stage = (qt - qt_first) & 1;
    if (qt + 1 < qt_end) {
      // The other stage was last read in the iteration before, which ended
      // with a barrier.
      uint16_t* next = sQdO + (stage ^ 1) * 2 * kQElems;
      float* next_stat = sStat + (stage ^ 1) * 2 * kBQ;
      LoadTileAsync<kHS, kBQ>(next, q_base, C3, (qt + 1) * kBQ, T);
      LoadTileAsync<kHS, kBQ>(next + kQElems, do_base, C, (qt + 1) * kBQ, T);
      RowStats<kHS, kBQ>(next_stat, next_stat + kBQ, do_base, o_base, lse_bh, C, (qt + 1) * kBQ, T);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint16_t* sQ = sQdO + stage * 2 * kQElems;
    const uint16_t* sdO = sQ + kQElems;
    const float* sD = sStat + stage * 2 * kBQ;
    const float* sL = sD + kBQ;
    const int q0 = qt * kBQ;

    // S^T = K Q^T (16 keys x kBQ queries per warp), then P^T in place.
    float s[kQN][4];
#pragma unroll
    for (int n = 0; n < kQN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      LdMatrixX4(a, sK + (warp * 16 + (lane & 15)) * kLdS + ks * 16 + 8 * (lane >> 4));
      MmaNK<kQN>(s, a, sQ, kLdS, ks, lane);
    }
#pragma unroll
    for (int n = 0; n < kQN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q_local = n * 8 + 2 * t + (e & 1);
        s[n][e] = key + 8 * (e >> 1) > q0 + q_local ? 0.0f : expf(s[n][e] * scale - sL[q_local]);
      }
    }
    // dV += P^T dO.
#pragma unroll
    for (int kk = 0; kk < kQN / 2; ++kk) {
      uint32_t a[4];
      AccToA(a, s, kk);
      MmaKN<kCN>(dv, a, sdO, kLdS, kk * 16, lane);
    }
    // dP^T = V dO^T, then dS^T = P^T (dP^T - D) in place.
    float dp[kQN][4];
#pragma unroll
    for (int n = 0; n < kQN; ++n) dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      LdMatrixX4(a, sV + (warp * 16 + (lane & 15)) * kLdS + ks * 16 + 8 * (lane >> 4));
      MmaNK<kQN>(dp, a, sdO, kLdS, ks, lane);
    }
#pragma unroll
    for (int n = 0; n < kQN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - sD[n * 8 + 2 * t + (e & 1)]);
    }
    // dK += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < kQN / 2; ++kk) {
      uint32_t a[4];
      AccToA(a, dp, kk);
      MmaKN<kCN>(dk, a, sQ, kLdS, kk * 16, lane);
    }
    __syncthreads();  // this stage is refilled at iteration qt + 1
  }

  // dK (scaled) and dV rows of the warp's keys below T, as bf16 pairs.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = key + 8 * r;
    if (row >= T) continue;
    uint16_t* dst = dqkv + (static_cast<size_t>(b) * T + row) * C3 + h * kHS + 2 * t;
    uint32_t* dk_dst = reinterpret_cast<uint32_t*>(dst + C);
    uint32_t* dv_dst = reinterpret_cast<uint32_t*>(dst + 2 * C);
#pragma unroll
    for (int n = 0; n < kCN; ++n) {
      dk_dst[4 * n] = PackBf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      dv_dst[4 * n] = PackBf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dQ of one 64-query tile of one (b, h): grid (B*NH, query tiles), longest
// first. Warp w owns queries 16w .. 16w + 15 (the forward's layout) and
// accumulates their dQ over the key tiles up to the diagonal, K and V
// double-buffered by cp.async:
//   S = Q K^T, P = exp(scale S - L) (0 where key > query),
//   dP = dO V^T, dS = P (dP - D), dQ += dS K,
// dS rounded to bf16 as the last product's left operand; dQ scaled at the
// end. Q and dO fragments are read from shared memory at each use, which
// keeps the registers for the three 16-row accumulator blocks (S, dP, dQ).
template <int kHS>
__global__ void __launch_bounds__(kTcThreads)
    FlashBackwardQTcKernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                           const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ out,
                           const float* __restrict__ lse, int T, int NH, float scale) {
  constexpr int kLdS = Ld(kHS);
  constexpr int kKSteps = kHS / 16;
  constexpr int kCN = kHS / 8;      // channel n-tiles of dQ
  constexpr int kKN = kTcTile / 8;  // key n-tiles of S and dP

  const int bh = static_cast<int>(blockIdx.x), b = bh / NH, h = bh % NH;
  const int qt = static_cast<int>(gridDim.y - 1 - blockIdx.y);
  const int q0 = qt * kTcTile;
  const int C = NH * kHS;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const uint16_t* q_base = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;
  const uint16_t* do_base = dout + static_cast<size_t>(b) * T * C + h * kHS;
  const uint16_t* o_base = out + static_cast<size_t>(b) * T * C + h * kHS;

  uint16_t* sQ = DynamicShared<uint16_t>();
  uint16_t* sdO = sQ + TileElems(kHS);
  uint16_t* sKV = sdO + TileElems(kHS);  // stage s: K at 2s, V at 2s + 1 tiles
  float* sD = reinterpret_cast<float*>(sKV + 4 * TileElems(kHS));
  float* sL = sD + kTcTile;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;

  LoadTileAsync<kHS>(sQ, q_base, C3, q0, T);
  LoadTileAsync<kHS>(sdO, do_base, C, q0, T);
  LoadTileAsync<kHS>(sKV, q_base + C, C3, 0, T);
  LoadTileAsync<kHS>(sKV + TileElems(kHS), q_base + 2 * C, C3, 0, T);
  CpAsyncCommit();
  RowStats<kHS, kTcTile>(sD, sL, do_base, o_base, lse + static_cast<size_t>(bh) * T, C, q0, T);

  float dq[kCN][4];
#pragma unroll
  for (int n = 0; n < kCN; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  const int row_local = warp * 16 + g;  // + 8 for e >= 2
  float rowD[2] = {0.0f, 0.0f}, rowL[2] = {0.0f, 0.0f};

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) {
      uint16_t* next = sKV + ((kt + 1) & 1) * 2 * TileElems(kHS);
      LoadTileAsync<kHS>(next, q_base + C, C3, (kt + 1) * kTcTile, T);
      LoadTileAsync<kHS>(next + TileElems(kHS), q_base + 2 * C, C3, (kt + 1) * kTcTile, T);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (kt == 0) {
      for (int r = 0; r < 2; ++r) {
        rowD[r] = sD[row_local + 8 * r];
        rowL[r] = sL[row_local + 8 * r];
      }
    }
    const uint16_t* sK = sKV + (kt & 1) * 2 * TileElems(kHS);
    const uint16_t* sV = sK + TileElems(kHS);

    // S = Q K^T, then P in place.
    float s[kKN][4];
#pragma unroll
    for (int n = 0; n < kKN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      LdMatrixX4(a, sQ + (warp * 16 + (lane & 15)) * kLdS + ks * 16 + 8 * (lane >> 4));
      MmaNK<kKN>(s, a, sK, kLdS, ks, lane);
    }
    const bool diagonal = kt == qt;
#pragma unroll
    for (int n = 0; n < kKN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key_local = n * 8 + 2 * t + (e & 1);
        const bool masked = diagonal && key_local > row_local + 8 * (e >> 1);
        s[n][e] = masked ? 0.0f : expf(s[n][e] * scale - rowL[e >> 1]);
      }
    }
    // dP = dO V^T, then dS = P (dP - D) in place.
    float dp[kKN][4];
#pragma unroll
    for (int n = 0; n < kKN; ++n) dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      LdMatrixX4(a, sdO + (warp * 16 + (lane & 15)) * kLdS + ks * 16 + 8 * (lane >> 4));
      MmaNK<kKN>(dp, a, sV, kLdS, ks, lane);
    }
#pragma unroll
    for (int n = 0; n < kKN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - rowD[e >> 1]);
    }
    // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < kKN / 2; ++kk) {
      uint32_t a[4];
      AccToA(a, dp, kk);
      MmaKN<kCN>(dq, a, sK, kLdS, kk * 16, lane);
    }
    __syncthreads();  // this stage is refilled at iteration kt + 1
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + row_local + 8 * r;
    if (row >= T) continue;
    uint32_t* dst = reinterpret_cast<uint32_t*>(dqkv + (static_cast<size_t>(b) * T + row) * C3 +
                                                h * kHS + 2 * t);
#pragma unroll
    for (int n = 0; n < kCN; ++n) {
      dst[4 * n] = PackBf16x2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
    }
  }
}

template <int kHS>
cudaError_t LaunchTcBackward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                             const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                             int B, int T, int NH, cudaStream_t stream) {
  constexpr auto kv_kernel = FlashBackwardKvTcKernel<kHS>;
  constexpr auto q_kernel = FlashBackwardQTcKernel<kHS>;
  cudaError_t err = AllowDynamicShared<kv_kernel>(TcBwdKvSmem(kHS));
  if (err == cudaSuccess) err = AllowDynamicShared<q_kernel>(TcBwdQSmem(kHS));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(B * NH),
                  static_cast<unsigned>((T + kTcTile - 1) / kTcTile));
  if (grid.y > kTcMaxGridY) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(kHS));
  auto* dq = reinterpret_cast<uint16_t*>(dqkv);
  auto* d_out = reinterpret_cast<const uint16_t*>(dout);
  auto* q = reinterpret_cast<const uint16_t*>(qkv);
  auto* o = reinterpret_cast<const uint16_t*>(out);
  err = Launch<kv_kernel>(grid, kTcThreads, TcBwdKvSmem(kHS), stream, dq, d_out, q, o, lse, T, NH,
                          scale);
  if (err != cudaSuccess) return err;
  return Launch<q_kernel>(grid, kTcThreads, TcBwdQSmem(kHS), stream, dq, d_out, q, o, lse, T, NH,
                          scale);
}

}  // namespace

cudaError_t LaunchFlashAttentionBackwardTc(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                           const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                           const float* lse, int B, int T, int NH, int HS,
                                           cudaStream_t stream) {
  if (B <= 0 || T <= 0 || NH <= 0) return cudaSuccess;
  if (!FlashAttentionTcBackwardApplies(dqkv, dout, qkv, out, HS)) return cudaErrorInvalidValue;
  return HS == 64 ? LaunchTcBackward<64>(dqkv, dout, qkv, out, lse, B, T, NH, stream)
                  : LaunchTcBackward<128>(dqkv, dout, qkv, out, lse, B, T, NH, stream);
}

cudaError_t LaunchFlashAttentionForwardTc(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                          int B, int T, int NH, int HS, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || NH <= 0) return cudaSuccess;
  if (!FlashAttentionTcApplies(out, qkv, HS)) return cudaErrorInvalidValue;
  return HS == 64 ? LaunchTc<64>(out, lse, qkv, B, T, NH, stream)
                  : LaunchTc<128>(out, lse, qkv, B, T, NH, stream);
}

LADDER_KERNELS_END
