// Causal self-attention forward on tensor cores (bf16 storage, head sizes 64
// and 128): FlashAttention-2's forward with mma.sync m16n8k16 (bf16 inputs,
// fp32 accumulators), ldmatrix and cp.async from kernels/tensor_core.cuh.
// Contract and launcher: kernels/flash_attention_tc.h; the math and the
// scalar kernels it replaces for these shapes: kernels/attention.cu.
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

// Starts copying rows [t0, t0 + 64) of a [T, kHS] head slice (row stride ld_src
// elements) into a shared tile: 16-byte pieces by cp.async for rows < T,
// zeros stored directly for rows >= T (never read from global memory).
template <int kHS>
__device__ __forceinline__ void LoadTileAsync(uint16_t* tile, const uint16_t* __restrict__ src,
                                              size_t ld_src, int t0, int T) {
  constexpr int kPieces = kHS / 8;  // 16-byte pieces per row
  for (int c = static_cast<int>(threadIdx.x); c < kTcTile * kPieces; c += kTcThreads) {
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

}  // namespace

cudaError_t LaunchFlashAttentionForwardTc(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                          int B, int T, int NH, int HS, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || NH <= 0) return cudaSuccess;
  if (!FlashAttentionTcApplies(out, qkv, HS)) return cudaErrorInvalidValue;
  return HS == 64 ? LaunchTc<64>(out, lse, qkv, B, T, NH, stream)
                  : LaunchTc<128>(out, lse, qkv, B, T, NH, stream);
}

LADDER_KERNELS_END
