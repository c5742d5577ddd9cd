// Causal multi-head self-attention, forward and backward: a flash kernel set
// (the default) and a naive one (for teaching, and as a plain cross-check),
// each for fp32 or bf16 storage (below, "storage types").
//
// Per (batch b, head h), with Q, K, V the [T, HS] slices of qkv and
// scale = 1/sqrt(HS):
//     S = scale * Q K^T     (S[i,j] masked to -inf for keys j later than query i)
//     P = softmax(S)        row by row; lse[i] = log sum_j exp(S[i,j]) is saved
//     O = P V
// Backward (FlashAttention-2), from dO and the saved lse, with P recomputed:
//     D[i] = sum_c dO[i,c] O[i,c]       (= sum_j P[i,j] dP[i,j])
//     dP = dO V^T       dS = P * (dP - D)
//     dV = P^T dO       dQ = scale * dS K       dK = scale * dS^T Q
//
// ---- flash: what it fuses -------------------------------------------------
// The naive kernels write S to memory, read it back for the softmax, write P,
// read P for the product with V: four trips of B*NH*T*T floats through HBM,
// which at T = 1024 is 16x the bytes of qkv itself. The flash forward fuses
// all three steps: a block owns a tile of 32 queries, walks the key tiles up
// to the diagonal, computes a 32 x 32 block of S in registers, turns it into
// P with an *online softmax* (a running row max m and sum l; when a tile
// raises the max from m to m', what was accumulated so far was scaled by
// exp(-m) instead of exp(-m'), so O and l are multiplied by exp(m - m')) and
// multiplies P into the output accumulator at once. O = O / l and
// lse = m + log(l) at the end. Nothing T x T ever leaves the chip.
//
// Bytes (HBM), with e = the bytes of one stored element (4 for fp32, 2 for
// bf16; lse is fp32 either way): the forward reads qkv once, 3*e*B*T*C bytes
// (12*B*T*C fp32, 6*B*T*C bf16), and writes out and lse, e*B*T*C + 4*B*NH*T
// bytes; the K/V tiles that several query tiles read again come from L2 (a
// head's K and V are 2*T*HS elements: 512 KiB fp32, 256 KiB bf16 at
// T = 1024, HS = 64). The backward reads qkv, out and dout once each,
// 5*e*B*T*C bytes, and lse, 4*B*NH*T (plus L2 re-reads), and writes dqkv
// once, 3*e*B*T*C: 8*e*B*T*C bytes in all (32*B*T*C fp32, 16*B*T*C bf16).
// The naive kernels add their trips through the B*NH*T*T fp32 scratch,
// the same for both storage types.
// FLOPs: each product over the causal half of the T x T square is T^2 * HS
// FLOPs per head (T^2/2 multiply-adds per channel). The forward does two
// (Q K^T, P V): 2*B*NH*T^2*HS. The backward does seven: its key-tile kernel
// recomputes Q K^T and dO V^T and forms P^T dO and dS^T Q, its query-tile
// kernel recomputes Q K^T and dO V^T and forms dS K. The minimum is five;
// the two recomputed products are the price of writing every gradient
// element from exactly one block (below) instead of adding dQ with atomics.
//
// ---- flash: launch shape, and why -----------------------------------------
// (The flash kernels are written once, in kernels/attention_flash.cuh, for
// this causal mask (CausalMask) and for context parallelism's attention by
// positions (kernels/attention_part.cu); the tiles and device helpers they
// use are kernels/attention_tiles.cuh's.)
// A block is 4 warps (128 threads) and owns one 32-row tile of one (b, h):
// grid (B*NH, tiles). A tile of 32 keys is one warp wide, so in every score
// block lane = key (or lane = query, in the backward's key-tile kernel) and
// warp w owns 8 rows: a thread computes 8 scores, their row max and row sum
// are warp shuffles (no shared-memory reductions, no __syncthreads), and
// 8 rows x 32 columns stay in registers. The Q/K/V/dO tiles sit in shared
// memory with an odd row stride (HS | 1): lanes reading 32 different rows of
// the same column then hit 32 different banks. The output accumulators
// (O, dQ, dK, dV: 32 x HS per block) live in shared memory too, a warp only
// touching its own 8 rows, so HS is any size up to kMaxFlashHeadSize with
// one compiled kernel; each lane owns columns lane, lane+32, ... of them and
// adds 32 keys' worth of products in registers before storing back.
// Causal work is uneven: the last query tile sees every key tile, the first
// only one. The forward and the dQ kernel therefore take their tiles last
// to first (blockIdx.y = 0 is the longest), and the dK/dV kernel first to
// last (key tile 0 is seen by every query tile), so the longest blocks start
// first and the short ones fill in at the end.
//
// ---- flash: determinism ---------------------------------------------------
// The backward's usual GPU form adds each (query tile, key tile)'s dQ share
// with float atomics, whose order changes from run to run. Here one kernel
// runs over key tiles (a block owns dK and dV of its 32 keys, walking the
// query tiles in increasing order) and another over query tiles (a block
// owns dQ of its 32 queries, walking key tiles in increasing order). Every
// gradient element is summed by one thread in an order fixed by the shape:
// the result is bitwise reproducible. D is recomputed where it is needed
// (32 dot products of length HS per query tile, a 1/(4*32) fraction of the
// tile's work), so the op needs no scratch.
//
// ---- storage types -----------------------------------------------------------
// Every kernel is one template over Storage, the element type of qkv, out,
// dout and dqkv: float or __nv_bfloat16 (backend.h "Precision"; the name is
// not T because T is the sequence length). All arithmetic is fp32 whatever
// the storage: an element is widened (exactly) where it is loaded, and each
// result (out, dq, dk, dv) is rounded once, to nearest even, where it is
// stored. lse and the naive scratch are fp32, so P is recomputed in the
// backward from the same fp32 lse for both types, and D = dO . O reads the
// stored (rounded) O, the one the backward is given.
// The shared-memory tiles stay fp32, widened once by LoadTile: the inner
// loops read every tile element many times (each of the 4 warps reads all
// of K and V, and a Q or dO tile is read again for every key tile it
// meets), so one conversion per load is cheaper than one per read; the odd
// row stride that keeps the lane = row reads free of bank conflicts is
// counted in 4-byte words (two bf16 per word would put pairs of rows in one
// bank); and one layout, one shared-memory size and one kMaxFlashHeadSize
// serve both types. bf16 tiles would halve the shared memory, which matters
// for the tensor-core version (its operands are bf16 in shared memory, read
// by ldmatrix), not for these fp32 FMA loops, which are bound by arithmetic,
// not by loads. Global loads and stores stay scalar and coalesced (a warp
// moves 128 bytes of fp32 or 64 of bf16 per instruction); with bf16 the
// kernels move half the bytes.
//
// ---- naive ----------------------------------------------------------------
// One thread per score, one warp per softmax row, one thread per output
// element: the definitions above written out, with B*NH*T*T floats of
// scratch for S/P (and dS in the backward). Slow and memory-hungry on
// purpose; it takes any head size.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_flash.cuh"
#include "kernels/attention_tiles.cuh"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kNaiveThreads = 256;

// ---- naive -----------------------------------------------------------------------

struct Shape {
  int B, T, NH, HS;
  __host__ __device__ int C() const { return NH * HS; }
};

// The q (k, v: part 1, 2) row of token t of head h in batch b.
template <typename Storage>
__device__ __forceinline__ const Storage* QkvRow(const Storage* qkv, const Shape& s, int b, int t,
                                                 int part, int h) {
  const size_t C = s.C();
  return qkv + (static_cast<size_t>(b) * s.T + t) * 3 * C + part * C + h * s.HS;
}

template <typename Storage>
__device__ __forceinline__ float Dot(const Storage* x, const Storage* y, int n) {
  float acc = 0.0f;
  for (int c = 0; c < n; ++c) acc += ToFloat(x[c]) * ToFloat(y[c]);
  return acc;
}

// att[bh][i][j] = scale * q_i . k_j for j <= i, -inf above the diagonal.
// One thread per score.
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveScoresKernel(float* __restrict__ att, const Storage* __restrict__ qkv, Shape s,
                      float scale) {
  const size_t TT = static_cast<size_t>(s.T) * s.T;
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= TT * s.B * s.NH) return;
  const int bh = static_cast<int>(idx / TT);
  const int i = static_cast<int>(idx % TT / s.T), j = static_cast<int>(idx % s.T);
  const int b = bh / s.NH, h = bh % s.NH;
  att[idx] = j <= i ? Dot(QkvRow(qkv, s, b, i, 0, h), QkvRow(qkv, s, b, j, 1, h), s.HS) * scale
                    : -INFINITY;
}

// Softmax of each row in place (masked entries become 0) and its lse.
// One warp per row (bh, i).
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveSoftmaxKernel(float* __restrict__ att, float* __restrict__ lse, Shape s) {
  const size_t rows = static_cast<size_t>(s.B) * s.NH * s.T;
  const size_t row = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const int i = static_cast<int>(row % s.T);
  float* a = att + row * s.T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += kWarpSize) mx = fmaxf(mx, a[j]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += kWarpSize) {
    a[j] = expf(a[j] - mx);
    sum += a[j];
  }
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < s.T; j += kWarpSize) a[j] = j <= i ? a[j] * inv : 0.0f;
  if (lane == 0) lse[row] = mx + logf(sum);
}

// out[b,i,h*HS + c] = sum_{j <= i} P[i][j] v_j[c]. One thread per output element.
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveOutKernel(Storage* __restrict__ out, const float* __restrict__ att,
                   const Storage* __restrict__ qkv, Shape s) {
  const size_t n = static_cast<size_t>(s.B) * s.T * s.C();
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int c = static_cast<int>(idx % s.HS), h = static_cast<int>(idx / s.HS % s.NH);
  const int i = static_cast<int>(idx / s.C() % s.T), b = static_cast<int>(idx / s.C() / s.T);
  const float* p = att + ((static_cast<size_t>(b) * s.NH + h) * s.T + i) * s.T;
  float acc = 0.0f;
  for (int j = 0; j <= i; ++j) acc += p[j] * ToFloat(QkvRow(qkv, s, b, j, 2, h)[c]);
  out[idx] = FromFloat<Storage>(acc);
}

// att[bh][i][j] = P = exp(scale * q_i . k_j - lse_i) for j <= i, else 0.
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveProbsKernel(float* __restrict__ att, const Storage* __restrict__ qkv,
                     const float* __restrict__ lse, Shape s, float scale) {
  const size_t TT = static_cast<size_t>(s.T) * s.T;
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= TT * s.B * s.NH) return;
  const int bh = static_cast<int>(idx / TT);
  const int i = static_cast<int>(idx % TT / s.T), j = static_cast<int>(idx % s.T);
  const int b = bh / s.NH, h = bh % s.NH;
  float p = 0.0f;
  if (j <= i) {
    const float sc = Dot(QkvRow(qkv, s, b, i, 0, h), QkvRow(qkv, s, b, j, 1, h), s.HS) * scale;
    p = expf(sc - lse[static_cast<size_t>(bh) * s.T + i]);
  }
  att[idx] = p;
}

// dV[j][c] = sum_{i >= j} P[i][j] dO[i][c]. One thread per element of dV.
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveDvKernel(Storage* __restrict__ dqkv, const float* __restrict__ att,
                  const Storage* __restrict__ dout, Shape s) {
  const size_t n = static_cast<size_t>(s.B) * s.T * s.C();
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int C = s.C();
  const int c = static_cast<int>(idx % s.HS), h = static_cast<int>(idx / s.HS % s.NH);
  const int j = static_cast<int>(idx / C % s.T), b = static_cast<int>(idx / C / s.T);
  const float* p = att + (static_cast<size_t>(b) * s.NH + h) * s.T * s.T;
  float acc = 0.0f;
  for (int i = j; i < s.T; ++i) {
    acc += p[static_cast<size_t>(i) * s.T + j] *
           ToFloat(dout[(static_cast<size_t>(b) * s.T + i) * C + h * s.HS + c]);
  }
  dqkv[(static_cast<size_t>(b) * s.T + j) * 3 * C + 2 * C + h * s.HS + c] = FromFloat<Storage>(acc);
}

// att = scale * dS = scale * P * (dO_i . v_j - D_i), in place, with
// D_i = dO_i . O_i recomputed by each thread (the naive kernels keep no
// buffer of their own).
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveDsKernel(float* __restrict__ att, const Storage* __restrict__ qkv,
                  const Storage* __restrict__ dout, const Storage* __restrict__ out, Shape s,
                  float scale) {
  const size_t TT = static_cast<size_t>(s.T) * s.T;
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= TT * s.B * s.NH) return;
  const int bh = static_cast<int>(idx / TT);
  const int i = static_cast<int>(idx % TT / s.T), j = static_cast<int>(idx % s.T);
  if (j > i) return;  // P = 0 there, and so is dS
  const int b = bh / s.NH, h = bh % s.NH;
  const size_t orow = (static_cast<size_t>(b) * s.T + i) * s.C() + h * s.HS;
  const float D = Dot(dout + orow, out + orow, s.HS);
  const float dp = Dot(dout + orow, QkvRow(qkv, s, b, j, 2, h), s.HS);
  att[idx] = att[idx] * (dp - D) * scale;
}

// dQ[i][c] = sum_{j <= i} dS[i][j] k_j[c] and dK[t][c] = sum_{i >= t} dS[i][t] q_i[c].
// One thread per (b, t, h, c), writing dQ of token t and dK of token t.
template <typename Storage>
__global__ void __launch_bounds__(kNaiveThreads)
    NaiveDqDkKernel(Storage* __restrict__ dqkv, const float* __restrict__ att,
                    const Storage* __restrict__ qkv, Shape s) {
  const size_t n = static_cast<size_t>(s.B) * s.T * s.C();
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int C = s.C();
  const int c = static_cast<int>(idx % s.HS), h = static_cast<int>(idx / s.HS % s.NH);
  const int t = static_cast<int>(idx / C % s.T), b = static_cast<int>(idx / C / s.T);
  const float* ds = att + (static_cast<size_t>(b) * s.NH + h) * s.T * s.T;
  float dq = 0.0f, dk = 0.0f;
  for (int j = 0; j <= t; ++j) {
    dq += ds[static_cast<size_t>(t) * s.T + j] * ToFloat(QkvRow(qkv, s, b, j, 1, h)[c]);
  }
  for (int i = t; i < s.T; ++i) {
    dk += ds[static_cast<size_t>(i) * s.T + t] * ToFloat(QkvRow(qkv, s, b, i, 0, h)[c]);
  }
  Storage* dst = dqkv + (static_cast<size_t>(b) * s.T + t) * 3 * C + h * s.HS + c;
  dst[0] = FromFloat<Storage>(dq);
  dst[C] = FromFloat<Storage>(dk);
}

unsigned Blocks(size_t threads) {
  return static_cast<unsigned>((threads + kNaiveThreads - 1) / kNaiveThreads);
}

bool Empty(int B, int T, int NH, int HS) { return B <= 0 || T <= 0 || NH <= 0 || HS <= 0; }

}  // namespace

template <typename Storage>
cudaError_t LaunchFlashAttentionForward(Storage* out, float* lse, const Storage* qkv, int B, int T,
                                        int NH, int HS, cudaStream_t stream) {
  if (Empty(B, T, NH, HS)) return cudaSuccess;
  if (HS > kMaxFlashHeadSize) return cudaErrorInvalidValue;
  const size_t smem = FlashForwardSmem(HS);
  constexpr auto kernel = FlashForwardKernel<Storage, CausalMask>;
  cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;
  return Launch<kernel>(grid, kThreads, smem, stream, out, lse, qkv, qkv, CausalMask{T}, T, T, NH,
                        HS, 1.0f / sqrtf(static_cast<float>(HS)), /*merge=*/false);
}

template <typename Storage>
cudaError_t LaunchFlashAttentionBackward(Storage* dqkv, const Storage* dout, const Storage* qkv,
                                         const Storage* out, const float* lse, int B, int T, int NH,
                                         int HS, cudaStream_t stream) {
  if (Empty(B, T, NH, HS)) return cudaSuccess;
  if (HS > kMaxFlashHeadSize) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;
  const CausalMask mask{T};
  const size_t smem_kv = FlashBackwardDkDvSmem(HS);
  constexpr auto dkdv = FlashBackwardDkDvKernel<Storage, CausalMask>;
  cudaError_t err = AllowDynamicShared<dkdv>(smem_kv);
  if (err != cudaSuccess) return err;
  err = Launch<dkdv>(grid, kThreads, smem_kv, stream, dqkv, dout, qkv, qkv, out, lse, mask, T, T,
                     NH, HS, scale);
  if (err != cudaSuccess) return err;
  const size_t smem_q = FlashBackwardDqSmem(HS);
  constexpr auto dq = FlashBackwardDqKernel<Storage, CausalMask>;
  err = AllowDynamicShared<dq>(smem_q);
  if (err != cudaSuccess) return err;
  return Launch<dq>(grid, kThreads, smem_q, stream, dqkv, dout, qkv, qkv, out, lse, mask, T, T, NH,
                    HS, scale);
}

template <typename Storage>
cudaError_t LaunchNaiveAttentionForward(Storage* out, float* lse, float* scratch,
                                        const Storage* qkv, int B, int T, int NH, int HS,
                                        cudaStream_t stream) {
  if (Empty(B, T, NH, HS)) return cudaSuccess;
  const Shape s{B, T, NH, HS};
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const size_t scores = static_cast<size_t>(B) * NH * T * T;
  cudaError_t err = Launch<NaiveScoresKernel<Storage>>(Blocks(scores), kNaiveThreads, 0, stream,
                                                       scratch, qkv, s, scale);
  if (err != cudaSuccess) return err;
  const size_t rows = static_cast<size_t>(B) * NH * T;
  err = Launch<NaiveSoftmaxKernel>(Blocks(rows * kWarpSize), kNaiveThreads, 0, stream, scratch, lse,
                                   s);
  if (err != cudaSuccess) return err;
  const size_t outs = static_cast<size_t>(B) * T * NH * HS;
  return Launch<NaiveOutKernel<Storage>>(Blocks(outs), kNaiveThreads, 0, stream, out,
                                         static_cast<const float*>(scratch), qkv, s);
}

template <typename Storage>
cudaError_t LaunchNaiveAttentionBackward(Storage* dqkv, float* scratch, const Storage* dout,
                                         const Storage* qkv, const Storage* out, const float* lse,
                                         int B, int T, int NH, int HS, cudaStream_t stream) {
  if (Empty(B, T, NH, HS)) return cudaSuccess;
  const Shape s{B, T, NH, HS};
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const size_t scores = static_cast<size_t>(B) * NH * T * T;
  const size_t elems = static_cast<size_t>(B) * T * NH * HS;
  cudaError_t err = Launch<NaiveProbsKernel<Storage>>(Blocks(scores), kNaiveThreads, 0, stream,
                                                      scratch, qkv, lse, s, scale);
  if (err != cudaSuccess) return err;
  err = Launch<NaiveDvKernel<Storage>>(Blocks(elems), kNaiveThreads, 0, stream, dqkv,
                                       static_cast<const float*>(scratch), dout, s);
  if (err != cudaSuccess) return err;
  err = Launch<NaiveDsKernel<Storage>>(Blocks(scores), kNaiveThreads, 0, stream, scratch, qkv, dout,
                                       out, s, scale);
  if (err != cudaSuccess) return err;
  return Launch<NaiveDqDkKernel<Storage>>(Blocks(elems), kNaiveThreads, 0, stream, dqkv,
                                          static_cast<const float*>(scratch), qkv, s);
}

// The two storage types (backend.h "Precision").
#define LADDER_ATTENTION_INSTANTIATE(Storage)                                                      \
  template cudaError_t LaunchFlashAttentionForward<Storage>(Storage*, float*, const Storage*, int, \
                                                            int, int, int, cudaStream_t);          \
  template cudaError_t LaunchFlashAttentionBackward<Storage>(                                      \
      Storage*, const Storage*, const Storage*, const Storage*, const float*, int, int, int, int,  \
      cudaStream_t);                                                                               \
  template cudaError_t LaunchNaiveAttentionForward<Storage>(                                       \
      Storage*, float*, float*, const Storage*, int, int, int, int, cudaStream_t);                 \
  template cudaError_t LaunchNaiveAttentionBackward<Storage>(                                      \
      Storage*, float*, const Storage*, const Storage*, const Storage*, const float*, int, int,    \
      int, int, cudaStream_t);
LADDER_ATTENTION_INSTANTIATE(float)
LADDER_ATTENTION_INSTANTIATE(__nv_bfloat16)
#undef LADDER_ATTENTION_INSTANTIATE

LADDER_KERNELS_END
