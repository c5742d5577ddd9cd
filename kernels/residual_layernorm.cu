// Residual add fused with LayerNorm, forward and backward.
//
// What it fuses: every transformer sub-layer ends with "add the branch to the
// residual stream, then LayerNorm the stream for the next sub-layer":
//   residual_out = residual_in + branch
//   y = (residual_out - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + 1e-5)
// Unfused, that is one kernel that reads residual_in and branch and writes
// residual_out, then a LayerNorm that reads residual_out back for the mean, again
// for the variance and again for the output. Both ops do a handful of flops per
// element, so they are bound by memory bandwidth, not arithmetic: the time is
// the bytes moved. Here each row is read from global memory once, kept on chip
// (in shared memory, as fp32) for the three passes, and written once. Per row
// of C elements of storage size S (4 bytes for f32, 2 for bf16): the forward
// reads 2SC (SC without the add) and writes 2SC (SC), plus gamma and beta (2SC,
// shared by all rows, from L2); the backward reads dy, x and d_residual (3SC)
// and writes d_residual (SC). Storing bf16 halves every one of those bytes.
//
// Why this shape: one warp owns one row. The row's sums are then warp-shuffle
// reductions (no __syncthreads, no shared-memory trees), and a row of C elements
// is C/32 elements per lane, read 16 bytes at a time (4 floats or 8 bf16) when
// alignment allows.
//
// Backward, per row, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// dx is added to d_residual (the residual stream's gradient accumulates: the
// layer above already wrote its share). dgamma = sum_rows dy * xhat and
// dbeta = sum_rows dy are reductions over *rows*, i.e. across warps and blocks.
// The usual GPU answer (llm.c) is atomicAdd, whose order, and therefore whose
// float rounding, changes from run to run. Here each warp sums its rows into
// its own slice of shared memory, each block adds its warps' slices in warp
// order into its own row of a scratch buffer, and a second small kernel adds
// the blocks' rows in block order. Every order depends on (N, C) only, so the
// result is bitwise reproducible.
//
// Element type (backend.h "Precision"): T, float or __nv_bfloat16, is the
// storage of activations and of gamma/beta; arithmetic, the statistics
// (mean, rstd) and the gradients of gamma/beta (accumulated in fp32 scratch
// and added to fp32 dgamma/dbeta) are fp32. Each stored result is rounded once:
// residual_out = T(residual_in + branch), y = T(...), and
// d_residual = T(d_residual + dx), the sum taken in fp32. The forward's
// statistics are those of the *stored* residual_out (rounded to T), not of
// the fp32 sum, so y is the LayerNorm of exactly the x the backward reads and
// the saved mean/rstd match that x.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/residual_layernorm.h"

LADDER_KERNELS_BEGIN
namespace {

constexpr float kEps = 1e-5f;
constexpr int kMaxWarpsPerBlock = 8;
// Backward grid cap, in warps: more warps keep more loads in flight, but each
// block adds a 2*C row of partial sums for the second kernel to reduce. About
// 16 warps per SM on a 132-SM H100/H200. A tuning knob, fixed (not queried from
// the device) because it sets the reduction order.
constexpr int kBackwardMaxWarps = 2048;
// The partial-sum reduction: 32 columns per block, kReduceGroups warps each
// summing every kReduceGroups-th partial row.
constexpr int kReduceGroups = 8;

int WarpsPerBlock(size_t smem_bytes_per_warp) {
  const size_t w = kDefaultDynamicShared / smem_bytes_per_warp;
  return static_cast<int>(std::clamp<size_t>(w, 1, kMaxWarpsPerBlock));
}

int BackwardWarpsPerBlock(int C) { return WarpsPerBlock(2 * sizeof(float) * C); }

int BackwardBlocks(int N, int C) {
  const int warps = BackwardWarpsPerBlock(C);
  const int needed = (N + warps - 1) / warps;
  return std::max(1, std::min(needed, kBackwardMaxWarps / warps));
}

// kVec fp32 values in shared memory (the row copy, the dgamma/dbeta
// partials) move through LoadFloats/StoreFloats (common.cuh): with bf16
// storage kVec is 8, 32 bytes of fp32, more than one shared access moves.

// ---- forward ----------------------------------------------------------------

// Block: warps_per_block warps, one row each. Dynamic shared memory: one fp32
// copy of each warp's row (warps_per_block * C floats).
template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    ResidualLayerNormForwardKernel(T* __restrict__ residual_out, T* __restrict__ y,
                                   float* __restrict__ mean, float* __restrict__ rstd,
                                   const T* __restrict__ residual_in, const T* __restrict__ branch,
                                   const T* __restrict__ gamma, const T* __restrict__ beta, int N,
                                   int C) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + warp;
  if (row >= N) return;  // whole warps leave together; nothing below syncs the block

  float* xs = DynamicShared<float>() + static_cast<size_t>(warp) * C;
  const size_t base = static_cast<size_t>(row) * C;
  // Lane l owns elements [i, i + kVec) for i = l*kVec, l*kVec + 32*kVec, ...:
  // consecutive lanes touch consecutive 16-byte chunks, so each warp-wide load
  // is one contiguous, coalesced 512-byte transaction.
  const int stride = kWarpSize * kVec;

  // Pass 1 (the only read of the stream): add the branch, write residual_out,
  // keep the row on chip, sum it.
  float sum = 0.0f;
  for (int i = lane * kVec; i < C; i += stride) {
    Vec<T, kVec> a = LoadVec<kVec>(residual_in + base + i);
    if (branch != nullptr) {
      const Vec<T, kVec> b = LoadVec<kVec>(branch + base + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) a.v[k] = FromFloat<T>(ToFloat(a.v[k]) + ToFloat(b.v[k]));
      StoreVec<kVec>(residual_out + base + i, a);
    }
    // The LayerNorm sees the stored (rounded to T) value, which is what the
    // backward will read as x.
    Vec<float, kVec> xf;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      xf.v[k] = ToFloat(a.v[k]);
      sum += xf.v[k];
    }
    StoreFloats<kVec>(xs + i, xf);
  }
  const float mu = WarpSum(sum) / C;

  // Pass 2: variance around the mean (two passes avoid the cancellation of
  // E[x^2] - E[x]^2). Each lane re-reads only the elements it wrote, so no
  // barrier is needed between the passes.
  float sq = 0.0f;
  for (int i = lane * kVec; i < C; i += stride) {
    const Vec<float, kVec> xf = LoadFloats<kVec>(xs + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float d = xf.v[k] - mu;
      sq += d * d;
    }
  }
  // 1/sqrtf, not rsqrtf: both are one instruction's worth of time here, and
  // the IEEE-rounded sqrt matches the CPU reference to the last bit more often.
  const float rs = 1.0f / sqrtf(WarpSum(sq) / C + kEps);

  // Pass 3: normalize, scale, shift.
  for (int i = lane * kVec; i < C; i += stride) {
    const Vec<float, kVec> xf = LoadFloats<kVec>(xs + i);
    const Vec<T, kVec> g = LoadVec<kVec>(gamma + i);
    const Vec<T, kVec> b = LoadVec<kVec>(beta + i);
    Vec<T, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      out.v[k] = FromFloat<T>((xf.v[k] - mu) * rs * ToFloat(g.v[k]) + ToFloat(b.v[k]));
    }
    StoreVec<kVec>(y + base + i, out);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// ---- backward -----------------------------------------------------------------

// Block: warps_per_block warps; warp w of block b takes rows
// b*warps + w, then + gridDim.x*warps, ... (a fixed assignment).
// Dynamic shared memory: per warp, fp32 partial sums [dgamma(C) | dbeta(C)].
// Output: partials[blockIdx.x] = this block's [dgamma | dbeta] (2*C floats).
template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    ResidualLayerNormBackwardKernel(T* __restrict__ d_residual, float* __restrict__ partials,
                                    const T* __restrict__ dy, const T* __restrict__ x,
                                    const T* __restrict__ gamma, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, int N, int C) {
  float* acc = DynamicShared<float>();
  const int warps = blockDim.x / kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  float* dgamma_acc = acc + static_cast<size_t>(warp) * 2 * C;
  float* dbeta_acc = dgamma_acc + C;
  const int stride = kWarpSize * kVec;

  // A lane only ever touches the columns it owns (same i as in the loops
  // below), so the warp's slice needs no synchronization until the end.
  const Vec<float, kVec> zero{};
  for (int i = lane * kVec; i < C; i += stride) {
    StoreFloats<kVec>(dgamma_acc + i, zero);
    StoreFloats<kVec>(dbeta_acc + i, zero);
  }

  for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
    const size_t base = static_cast<size_t>(row) * C;
    const float mu = mean[row];
    const float rs = rstd[row];

    // Pass 1: the two row means the gradient needs.
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = lane * kVec; i < C; i += stride) {
      const Vec<T, kVec> d = LoadVec<kVec>(dy + base + i);
      const Vec<T, kVec> xv = LoadVec<kVec>(x + base + i);
      const Vec<T, kVec> gv = LoadVec<kVec>(gamma + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float g = ToFloat(d.v[k]) * ToFloat(gv.v[k]);
        sum_g += g;
        sum_gx += g * ((ToFloat(xv.v[k]) - mu) * rs);
      }
    }
    const float mean_g = WarpSum(sum_g) / C;
    const float mean_gx = WarpSum(sum_gx) / C;

    // Pass 2: dx into d_residual, dy*xhat and dy into the warp's partials.
    // dy and x are read a second time; the row was just loaded by this warp,
    // so these reads come from L1/L2, not HBM. (Caching them in shared memory
    // too would cost occupancy; a measured choice to revisit with timings.)
    for (int i = lane * kVec; i < C; i += stride) {
      const Vec<T, kVec> d = LoadVec<kVec>(dy + base + i);
      const Vec<T, kVec> xv = LoadVec<kVec>(x + base + i);
      const Vec<T, kVec> gv = LoadVec<kVec>(gamma + i);
      Vec<T, kVec> dr = LoadVec<kVec>(d_residual + base + i);
      Vec<float, kVec> ag = LoadFloats<kVec>(dgamma_acc + i);
      Vec<float, kVec> ab = LoadFloats<kVec>(dbeta_acc + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float dyk = ToFloat(d.v[k]);
        const float xhat = (ToFloat(xv.v[k]) - mu) * rs;
        const float g = dyk * ToFloat(gv.v[k]);
        dr.v[k] = FromFloat<T>(ToFloat(dr.v[k]) + rs * (g - mean_g - xhat * mean_gx));
        ag.v[k] += dyk * xhat;
        ab.v[k] += dyk;
      }
      StoreVec<kVec>(d_residual + base + i, dr);
      StoreFloats<kVec>(dgamma_acc + i, ag);
      StoreFloats<kVec>(dbeta_acc + i, ab);
    }
  }

  // The block's partial: its warps' slices added in warp order. Every warp
  // reaches this barrier (a warp without rows contributes zeros).
  __syncthreads();
  float* out = partials + static_cast<size_t>(blockIdx.x) * 2 * C;
  for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += acc[static_cast<size_t>(w) * 2 * C + j];
    out[j] = s;
  }
}

// dgamma[c] += sum_b partials[b][c]; dbeta[c] += sum_b partials[b][C + c].
// Block (32, kReduceGroups): threadIdx.x picks one of 32 adjacent columns (a
// coalesced 128-byte read per warp), threadIdx.y one of kReduceGroups fixed
// subsets of the partial rows; the subsets' sums are then added in order.
__global__ void __launch_bounds__(kWarpSize* kReduceGroups)
    SumPartialsKernel(float* __restrict__ dgamma, float* __restrict__ dbeta,
                      const float* __restrict__ partials, int num_partials, int C) {
  float(*group_sums)[kWarpSize] = reinterpret_cast<float(*)[kWarpSize]>(DynamicShared<float>());
  const int j = blockIdx.x * kWarpSize + threadIdx.x;  // column of [dgamma | dbeta]
  float s = 0.0f;
  if (j < 2 * C) {
    for (int b = threadIdx.y; b < num_partials; b += kReduceGroups) {
      s += partials[static_cast<size_t>(b) * 2 * C + j];
    }
  }
  group_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < 2 * C) {
    float total = 0.0f;
    for (int g = 0; g < kReduceGroups; ++g) total += group_sums[g][threadIdx.x];
    if (j < C) {
      dgamma[j] += total;
    } else {
      dbeta[j - C] += total;
    }
  }
}

// ---- launch helpers -----------------------------------------------------------

template <typename T, int kVec>
cudaError_t ForwardImpl(T* residual_out, T* y, float* mean, float* rstd, const T* residual_in,
                        const T* branch, const T* gamma, const T* beta, int N, int C,
                        cudaStream_t stream) {
  const int warps = WarpsPerBlock(sizeof(float) * C);
  const size_t smem = sizeof(float) * static_cast<size_t>(warps) * C;
  // Wide rows (C > 12288) need more than the default 48 KiB.
  constexpr auto kernel = ResidualLayerNormForwardKernel<T, kVec>;
  cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  const int blocks = (N + warps - 1) / warps;
  return Launch<kernel>(blocks, warps * kWarpSize, smem, stream, residual_out, y, mean, rstd,
                        residual_in, branch, gamma, beta, N, C);
}

template <typename T, int kVec>
cudaError_t BackwardImpl(T* d_residual, float* dgamma, float* dbeta, float* scratch, const T* dy,
                         const T* x, const T* gamma, const float* mean, const float* rstd, int N,
                         int C, cudaStream_t stream) {
  const int warps = BackwardWarpsPerBlock(C);
  const int blocks = BackwardBlocks(N, C);
  const size_t smem = 2 * sizeof(float) * static_cast<size_t>(warps) * C;
  // Wide rows (C > 6144) need more than the default 48 KiB.
  constexpr auto kernel = ResidualLayerNormBackwardKernel<T, kVec>;
  cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  err = Launch<kernel>(blocks, warps * kWarpSize, smem, stream, d_residual, scratch, dy, x, gamma,
                       mean, rstd, N, C);
  if (err != cudaSuccess) return err;
  const int reduce_blocks = (2 * C + kWarpSize - 1) / kWarpSize;
  return Launch<SumPartialsKernel>(reduce_blocks, dim3(kWarpSize, kReduceGroups),
                                   sizeof(float) * kReduceGroups * kWarpSize, stream, dgamma, dbeta,
                                   scratch, blocks, C);
}

}  // namespace

size_t ResidualLayerNormBackwardScratchFloats(int N, int C) {
  if (N <= 0 || C <= 0) return 0;
  return static_cast<size_t>(BackwardBlocks(N, C)) * 2 * static_cast<size_t>(C);
}

template <typename T>
cudaError_t LaunchResidualLayerNormForward(T* residual_out, T* y, float* mean, float* rstd,
                                           const T* residual_in, const T* branch, const T* gamma,
                                           const T* beta, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  // 16-byte vectors when every row starts aligned: C a multiple of the vector
  // and every base pointer aligned (row r starts at base + r*C).
  const bool vec = C % kVec16<T> == 0 && Aligned16(y) && Aligned16(residual_in) &&
                   Aligned16(gamma) && Aligned16(beta) &&
                   (branch == nullptr || (Aligned16(branch) && Aligned16(residual_out)));
  if (vec) {
    return ForwardImpl<T, kVec16<T>>(residual_out, y, mean, rstd, residual_in, branch, gamma, beta,
                                     N, C, stream);
  }
  return ForwardImpl<T, 1>(residual_out, y, mean, rstd, residual_in, branch, gamma, beta, N, C,
                           stream);
}

template <typename T>
cudaError_t LaunchResidualLayerNormBackward(T* d_residual, float* dgamma, float* dbeta,
                                            float* scratch, const T* dy, const T* x, const T* gamma,
                                            const float* mean, const float* rstd, int N, int C,
                                            cudaStream_t stream) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  const bool vec = C % kVec16<T> == 0 && Aligned16(d_residual) && Aligned16(dy) && Aligned16(x) &&
                   Aligned16(gamma);
  if (vec) {
    return BackwardImpl<T, kVec16<T>>(d_residual, dgamma, dbeta, scratch, dy, x, gamma, mean, rstd,
                                      N, C, stream);
  }
  return BackwardImpl<T, 1>(d_residual, dgamma, dbeta, scratch, dy, x, gamma, mean, rstd, N, C,
                            stream);
}

// The two storage types (backend.h "Precision").
#define LADDER_RESIDUAL_LAYERNORM_INSTANTIATE(T)                                                \
  template cudaError_t LaunchResidualLayerNormForward<T>(                                       \
      T*, T*, float*, float*, const T*, const T*, const T*, const T*, int, int, cudaStream_t);  \
  template cudaError_t LaunchResidualLayerNormBackward<T>(T*, float*, float*, float*, const T*, \
                                                          const T*, const T*, const float*,     \
                                                          const float*, int, int, cudaStream_t);
LADDER_RESIDUAL_LAYERNORM_INSTANTIATE(float)
LADDER_RESIDUAL_LAYERNORM_INSTANTIATE(__nv_bfloat16)
#undef LADDER_RESIDUAL_LAYERNORM_INSTANTIATE

LADDER_KERNELS_END
