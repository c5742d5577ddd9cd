// Attention by positions, forward and backward, for fp32 or bf16 storage:
// one block of context parallelism's ring (Backend::AttentionPartForward and
// AttentionPartBackward).
//
// A rank holds Tq query tokens of each sequence and meets, one ring step at
// a time, blocks of Tk keys and values: its own, then the other ranks'.
// Positions say which pairs count (query i sees key j iff k_pos[j] <=
// q_pos[i]); they are explicit because a rank's tokens are not contiguous
// (an early and a late chunk of each sequence). Per (b, h), with Q the
// [Tq, HS] slice of q_qkv, K and V the [Tk, HS] slices of kv_qkv and
// scale = 1/sqrt(HS):
//     S = scale * Q K^T (masked)   P = softmax(S)   O = P V   lse2 = log sum exp S
// and, to merge with the partial result (out1, lse1) of the earlier steps,
//     lse = logaddexp(lse1, lse2)   out = out1 exp(lse1 - lse) + O exp(lse2 - lse).
// The backward of one block, from the FINAL out and lse (over all blocks):
//     P = exp(S - lse)     D = rowsum(dO * out)     dS = P * (dO V^T - D)
//     dQ += scale * dS K   dK += scale * dS^T Q     dV += P^T dO
// With the whole row's lse, P is the whole row's softmax restricted to the
// block, so the blocks' shares add up to causal attention's gradient.
//
// ---- what it fuses, and the bytes it moves ----------------------------------
// These are kernels/attention.cu's flash kernels (its comment explains the
// tiles, the launch shape and the online softmax; the helpers are shared,
// kernels/attention_tiles.cuh) with three changes: Q and K/V come from two
// tensors; the mask compares positions instead of indices; the results
// combine with what the outputs hold. The forward fuses the scores, the mask,
// the online softmax, P V, the normalization and the log-sum-exp merge; the
// backward recomputes P from lse like attention.cu's.
// Bytes (HBM), e = 4 (fp32) or 2 (bf16) per stored element, lse and
// positions 4: the forward reads q of q_qkv and k, v of kv_qkv once,
// e*B*(Tq + 2*Tk)*C (K/V tiles that several query tiles read again come from
// L2), and writes out and lse, e*B*Tq*C + 4*B*NH*Tq; a merge first reads
// them too. The backward reads q, dout and out of the Tq queries and k, v of
// the Tk keys once, e*B*(3*Tq + 2*Tk)*C, and lse, 4*B*NH*Tq, and adds into
// the q part of dq_qkv and the k, v parts of dkv_qkv: a read and a write of
// each, 2*e*B*(Tq + 2*Tk)*C. Two tiles with no allowed pair (in a ring
// step, a rank's early chunk against another rank's late one, for one) cost
// a read of the positions and nothing else: no K/V load, no arithmetic.
//
// ---- launch shape -------------------------------------------------------------
// attention.cu's: 4 warps per block, 32-row tiles, lane = key (lane = query
// in the dK/dV kernel). The forward and the dQ kernel run a block per
// (b*NH + h, query tile), grid (B*NH, ceil(Tq/32)); the dK/dV kernel a block
// per (b*NH + h, key tile), grid (B*NH, ceil(Tk/32)). Whether a tile pair is
// skipped is decided from the tiles' largest query and smallest key position,
// which every warp computes alike, so the whole block skips together and
// meets every barrier. Inside a tile pair a position is read where it is
// compared (lanes of a warp read one address: a broadcast from L1) rather
// than held in registers across the loop, which made ptxas spill.
//
// ---- determinism ---------------------------------------------------------------
// As in attention.cu: no atomics. A block owns the out/lse rows of its
// queries (forward), the dq rows of its queries (dQ kernel) or the dk, dv
// rows of its keys (dK/dV kernel), walks the other side's tiles in
// increasing order, and one thread reads, adds and writes each element.
//
// ---- storage -------------------------------------------------------------------
// Storage (float or __nv_bfloat16) is the type of q_qkv, kv_qkv, out, dout
// and the gradients; arithmetic is fp32 with tiles widened on load, and each
// stored result (out after the merge, a gradient after its +=) is rounded
// once. A bf16 += therefore rounds once per ring step.
#include <climits>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_part.h"
#include "kernels/attention_tiles.cuh"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

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

// The largest position of the tile of rows [t0, t0 + kTile) (lane = row;
// rows past T do not count), in every lane: what decides, with the other
// tile's smallest position (TileMinPos), whether any pair of two tiles is
// allowed. Every warp of a block computes the same value, so a decision on
// it is uniform over the block.
__device__ __forceinline__ int TileMaxPos(const int32_t* __restrict__ pos, int t0, int T,
                                          int lane) {
  const int t = t0 + lane;
  return WarpMaxInt(t < T ? pos[t] : INT_MIN);
}
__device__ __forceinline__ int TileMinPos(const int32_t* __restrict__ pos, int t0, int T,
                                          int lane) {
  const int t = t0 + lane;
  return WarpMinInt(t < T ? pos[t] : INT_MAX);
}

// ---- forward ----------------------------------------------------------------------

// Grid (B*NH, query tiles), kThreads threads. Shared memory (floats), as
// attention.cu's forward: Q, K [kTile][ld] | V, O [kTile][HS] |
// P [kWarps][kRows][kTile].
template <typename Storage>
__global__ void __launch_bounds__(kThreads)
    PartForwardKernel(Storage* __restrict__ out, float* __restrict__ lse,
                      const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                      const int32_t* __restrict__ q_pos, const int32_t* __restrict__ k_pos, int Tq,
                      int Tk, int NH, int HS, float scale, bool merge) {
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = blockIdx.y * kTile;
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

  // Running statistics of the warp's 8 query rows. Rows past Tq take part in
  // every step (so every warp meets every barrier) but see no key.
  const int row0 = i0 + warp * kRows;
  float m[kRows], l[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  const int q_max = TileMaxPos(q_pos, i0, Tq, lane);

  for (int j0 = 0; j0 < Tk; j0 += kTile) {
    const int key = j0 + lane;
    const int kp = key < Tk ? k_pos[key] : INT_MAX;
    if (WarpMinInt(kp) > q_max) continue;  // every pair of the two tiles masked
    __syncthreads();                       // the previous tile's K/V are no longer read
    LoadTile(sK, ld, k_base, C3, j0, Tk, HS);
    LoadTile(sV, HS, k_base + C, C3, j0, Tk, HS);
    __syncthreads();

    float s[kRows];
    ScoreDots(sQ + warp * kRows * ld, sK, ld, HS, lane, s);
    float corr[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool valid = key < Tk && row0 + i < Tq && kp <= q_pos[row0 + i];
      sP[i * kTile + lane] = OnlineSoftmaxStep(s[i] * scale, valid, m[i], l[i], corr[i]);
    }
    __syncwarp();
    AddTileProducts<true>(sO, warp * kRows, sP, sV, HS, HS, lane, corr);  // O = O corr + P V
    __syncwarp();  // P is rewritten by the next tile
  }

  // This block's out2 = O / l and lse2 = m + log(l) (0 and -inf for a row
  // that saw no key: l = 0), stored or merged into (out1, lse1).
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
    if (merge) {
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

// Grid (B*NH, query tiles), kThreads threads. Shared memory (floats), as
// attention.cu's dQ kernel: Q, dO, K, V [kTile][ld] | dQ [kTile][HS] |
// dS [kWarps][kRows][kTile].
template <typename Storage>
__global__ void __launch_bounds__(kThreads)
    PartBackwardDqKernel(Storage* dq_qkv, const Storage* __restrict__ dout,
                         const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                         const Storage* __restrict__ out, const float* __restrict__ lse,
                         const int32_t* __restrict__ q_pos, const int32_t* __restrict__ k_pos,
                         int Tq, int Tk, int NH, int HS, float scale) {
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = blockIdx.y * kTile;
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
  const int q_max = TileMaxPos(q_pos, i0, Tq, lane);

  bool any = false;  // some tile pair had an allowed pair (uniform over the block)
  for (int j0 = 0; j0 < Tk; j0 += kTile) {
    const int key = j0 + lane;
    const int kp = key < Tk ? k_pos[key] : INT_MAX;
    if (WarpMinInt(kp) > q_max) continue;
    any = true;
    __syncthreads();  // Q/dO loaded (first tile); the previous K/V no longer read
    LoadTile(sK, ld, k_base, C3, j0, Tk, HS);
    LoadTile(sV, ld, k_base + C, C3, j0, Tk, HS);
    __syncthreads();

    float s[kRows], dp[kRows];
    ScoreAndGradDots(sQ + warp * kRows * ld, sdO + warp * kRows * ld, sK, sV, ld, HS, lane, s, dp);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool valid = key < Tk && row0 + i < Tq && kp <= q_pos[row0 + i];
      const float p = valid ? expf(s[i] * scale - L[i]) : 0.0f;
      sS[i * kTile + lane] = p * (dp[i] - D[i]) * scale;  // scale * dS
    }
    __syncwarp();
    AddTileProducts<false>(sdQ, warp * kRows, sS, sK, ld, HS, lane);  // dQ += scale dS K
    __syncwarp();
  }
  if (!any) return;  // adds nothing: leave dq_qkv as it is

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + i;
    if (row >= Tq) continue;
    Storage* dst = dq_qkv + (static_cast<size_t>(b) * Tq + row) * C3 + h * HS;
    for (int col = lane; col < HS; col += kWarpSize) {
      dst[col] = FromFloat<Storage>(ToFloat(dst[col]) + sdQ[(warp * kRows + i) * HS + col]);
    }
  }
}

// ---- backward: dK, dV over key tiles -------------------------------------------

// Grid (B*NH, key tiles), kThreads threads; warp w owns keys j0 + 8w .. + 7,
// lane = query of the current query tile. Shared memory (floats), as
// attention.cu's dK/dV kernel: K, V, Q, dO [kTile][ld] | dK, dV [kTile][HS] |
// P, dS [kWarps][kRows][kTile] | D, lse [kTile].
template <typename Storage>
__global__ void __launch_bounds__(kThreads)
    PartBackwardDkDvKernel(Storage* dkv_qkv, const Storage* __restrict__ dout,
                           const Storage* __restrict__ q_qkv, const Storage* __restrict__ kv_qkv,
                           const Storage* __restrict__ out, const float* __restrict__ lse,
                           const int32_t* __restrict__ q_pos, const int32_t* __restrict__ k_pos,
                           int Tq, int Tk, int NH, int HS, float scale) {
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
  const int k_min = TileMinPos(k_pos, j0, Tk, lane);

  bool any = false;  // as in the dQ kernel
  for (int i0 = 0; i0 < Tq; i0 += kTile) {
    const int query = i0 + lane;
    const int qp = query < Tq ? q_pos[query] : INT_MIN;
    if (WarpMaxInt(qp) < k_min) continue;  // every pair of the two tiles masked
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
    const float Dq = sD[lane], Lq = sL[lane];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool valid = key0 + i < Tk && query < Tq && k_pos[key0 + i] <= qp;
      const float p = valid ? expf(s[i] * scale - Lq) : 0.0f;
      sP[i * kTile + lane] = p;
      sS[i * kTile + lane] = p * (dp[i] - Dq) * scale;  // scale * dS
    }
    __syncwarp();
    // dV += P^T dO and dK += (scale * dS)^T Q, over the tile's queries in order.
    AddTileProductPair(sdV, sP, sdO, sdK, sS, sQ, warp * kRows, ld, HS, lane);
    __syncwarp();
  }
  if (!any) return;

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int key = key0 + i;
    if (key >= Tk) continue;
    Storage* dst = dkv_qkv + (static_cast<size_t>(b) * Tk + key) * C3 + C + h * HS;  // dv at +C
    for (int col = lane; col < HS; col += kWarpSize) {
      dst[col] = FromFloat<Storage>(ToFloat(dst[col]) + sdK[(warp * kRows + i) * HS + col]);
      dst[C + col] = FromFloat<Storage>(ToFloat(dst[C + col]) + sdV[(warp * kRows + i) * HS + col]);
    }
  }
}

unsigned Tiles(int T) { return static_cast<unsigned>((T + kTile - 1) / kTile); }

}  // namespace

template <typename Storage>
cudaError_t LaunchAttentionPartForward(Storage* out, float* lse, const Storage* q_qkv,
                                       const Storage* kv_qkv, const int32_t* q_pos,
                                       const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                       bool merge, cudaStream_t stream) {
  if (B <= 0 || Tq <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  if (HS > kMaxFlashHeadSize || Tk < 0) return cudaErrorInvalidValue;
  const dim3 grid(B * NH, Tiles(Tq));
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;
  const size_t smem = FlashForwardSmem(HS);
  constexpr auto kernel = PartForwardKernel<Storage>;
  const cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  return Launch<kernel>(grid, kThreads, smem, stream, out, lse, q_qkv, kv_qkv, q_pos, k_pos, Tq, Tk,
                        NH, HS, 1.0f / sqrtf(static_cast<float>(HS)), merge);
}

template <typename Storage>
cudaError_t LaunchAttentionPartBackward(Storage* dq_qkv, Storage* dkv_qkv, const Storage* dout,
                                        const Storage* q_qkv, const Storage* kv_qkv,
                                        const Storage* out, const float* lse, const int32_t* q_pos,
                                        const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                        cudaStream_t stream) {
  if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  if (HS > kMaxFlashHeadSize) return cudaErrorInvalidValue;
  const dim3 grid_q(B * NH, Tiles(Tq)), grid_k(B * NH, Tiles(Tk));
  if (grid_q.y > kMaxGridY || grid_k.y > kMaxGridY) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const size_t smem_kv = FlashBackwardDkDvSmem(HS);
  constexpr auto dkdv = PartBackwardDkDvKernel<Storage>;
  cudaError_t err = AllowDynamicShared<dkdv>(smem_kv);
  if (err != cudaSuccess) return err;
  err = Launch<dkdv>(grid_k, kThreads, smem_kv, stream, dkv_qkv, dout, q_qkv, kv_qkv, out, lse,
                     q_pos, k_pos, Tq, Tk, NH, HS, scale);
  if (err != cudaSuccess) return err;
  const size_t smem_q = FlashBackwardDqSmem(HS);
  constexpr auto dq = PartBackwardDqKernel<Storage>;
  err = AllowDynamicShared<dq>(smem_q);
  if (err != cudaSuccess) return err;
  return Launch<dq>(grid_q, kThreads, smem_q, stream, dq_qkv, dout, q_qkv, kv_qkv, out, lse, q_pos,
                    k_pos, Tq, Tk, NH, HS, scale);
}

// The two storage types (backend.h "Precision").
#define LADDER_ATTENTION_PART_INSTANTIATE(Storage)                                                \
  template cudaError_t LaunchAttentionPartForward<Storage>(                                       \
      Storage*, float*, const Storage*, const Storage*, const int32_t*, const int32_t*, int, int, \
      int, int, int, bool, cudaStream_t);                                                         \
  template cudaError_t LaunchAttentionPartBackward<Storage>(                                      \
      Storage*, Storage*, const Storage*, const Storage*, const Storage*, const Storage*,         \
      const float*, const int32_t*, const int32_t*, int, int, int, int, int, cudaStream_t);
LADDER_ATTENTION_PART_INSTANTIATE(float)
LADDER_ATTENTION_PART_INSTANTIATE(__nv_bfloat16)
#undef LADDER_ATTENTION_PART_INSTANTIATE

LADDER_KERNELS_END
