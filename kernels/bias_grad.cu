// Bias gradient of a linear layer: dbias[OC] += column sums of dout [N, OC].
//
// Storage: dout is T, float or __nv_bfloat16 (the activation gradient's
// storage dtype, backend.h "Precision"); dbias and every partial sum are fp32
// whatever T is (a parameter gradient: bf16 elements are widened exactly and
// summed in fp32, never rounded to bf16).
//
// The matmul's backward is two GEMMs (cuBLASLt) plus this reduction over the
// rows. It reads the N x OC gradient once (sizeof(T)*N*OC bytes: 4 or 2 per
// element) and does N*OC adds: a quarter FLOP per byte in fp32, a half in
// bf16, bound by memory bandwidth either way. cuBLASLt can fold it
// into the dweight GEMM's epilogue (BGRADB), but that epilogue sums with an
// order that is not promised to be the same on every GPU and library version;
// a standalone pass costs one extra read of dout and keeps the bits fixed.
//
// Deterministic two-stage reduction (like residual_layernorm's dgamma):
//   stage 1: the rows are cut into `chunks` contiguous chunks (a number fixed
//     by (N, OC)); block (x, y) sums the rows of chunk y for 32 * kVec adjacent
//     columns into partials[y][columns];
//   stage 2: for each column, the chunks' partials are added in chunk order
//     and the total added to dbias.
// No atomics anywhere: every add's order depends only on the shape.
//
// Launch shapes. Stage 1: blocks of 32 x 8 threads. threadIdx.x picks a
// 16-byte vector of columns (kVec = kVec16<T>, 4 floats or 8 bf16, when
// OC % kVec == 0 and dout is aligned; 1 otherwise), so each warp reads 512
// contiguous bytes of a row per instruction;
// threadIdx.y is one of 8 interleaved subsets of the chunk's rows (more loads
// in flight per block). The 8 subset sums meet in shared memory and are added
// in subset order. The chunk count aims at ~1024 blocks in all (8 per SM of an
// H100/H200, enough to cover load latency) without chunks shorter than 64
// rows, which also bounds the scratch: at most ~1024 * 128 floats. The
// result depends on neither T's vector width nor the alignment: bf16 dout
// gives bitwise the dbias of an f32 dout holding the same (widened) values.
// Stage 2: blocks of 32 x 8, 32 columns each, the same interleaved subsets
// over the chunks.
#include <algorithm>

#include "kernels/bias_grad.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kGroups = 8;           // blockDim.y: interleaved row (or chunk) subsets
constexpr int kTargetBlocks = 1024;  // stage 1 grid size aimed at
constexpr int kMinRowsPerChunk = 64;

// Chunks of rows for stage 1: ~kTargetBlocks blocks in all, each chunk at
// least kMinRowsPerChunk rows. Counted in 32-column blocks whatever the
// vector width, so the chunks, the scratch size and every sum's order depend
// on (N, OC) only, not on where the buffers happen to sit: per column, both
// widths add row subset g's rows in row order, then the subsets in order.
int Chunks(int N, int OC) {
  const int col_blocks = (OC + kWarpSize - 1) / kWarpSize;
  const int max_chunks = std::max(1, kTargetBlocks / col_blocks);
  return std::clamp((N + kMinRowsPerChunk - 1) / kMinRowsPerChunk, 1, max_chunks);
}

// partials[blockIdx.y][c] = sum of dout[r][c] over the rows r of chunk
// blockIdx.y, for the 32 * kVec columns c of block blockIdx.x, in fp32.
// Shared: kGroups x (32 * kVec) floats.
template <typename T, int kVec>
__global__ void __launch_bounds__(kWarpSize* kGroups)
    ColumnPartialsKernel(float* __restrict__ partials, const T* __restrict__ dout, int N, int OC,
                         int rows_per_chunk) {
  constexpr int kCols = kWarpSize * kVec;
  // The sums go to shared memory in 16-byte pieces (common.cuh kFloatPiece):
  // with kVec = 8 a Vec<float, 8> would need 32-byte alignment, and the
  // region has 16.
  constexpr int kPiece = kFloatPiece<kVec>;
  float* acc = DynamicShared<float>();
  const int col0 = blockIdx.x * kCols;
  const int col = col0 + threadIdx.x * kVec;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  Vec<float, kPiece> s[kVec / kPiece] = {};
  if (col < OC) {  // with kVec > 1, OC % kVec == 0: the whole vector is in range
    for (int r = begin + threadIdx.y; r < end; r += kGroups) {
      const Vec<T, kVec> d = LoadVec<kVec>(dout + static_cast<int64_t>(r) * OC + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) s[k / kPiece].v[k % kPiece] += ToFloat(d.v[k]);
    }
  }
#pragma unroll
  for (int p = 0; p < kVec / kPiece; ++p) {
    StoreVec<kPiece>(acc + threadIdx.y * kCols + threadIdx.x * kVec + p * kPiece, s[p]);
  }
  __syncthreads();
  // The block's kCols (<= 256) columns, one per thread, subsets added in order.
  const int t = threadIdx.y * kWarpSize + threadIdx.x;
  if (t < kCols && col0 + t < OC) {
    float total = 0.0f;
    for (int g = 0; g < kGroups; ++g) total += acc[g * kCols + t];
    partials[static_cast<int64_t>(blockIdx.y) * OC + col0 + t] = total;
  }
}

// dbias[j] += sum over chunks of partials[chunk][j], 32 columns per block.
// Shared: kGroups x 32 floats.
__global__ void __launch_bounds__(kWarpSize* kGroups)
    SumChunksKernel(float* __restrict__ dbias, const float* __restrict__ partials, int chunks,
                    int OC) {
  float* group_sums = DynamicShared<float>();
  const int j = blockIdx.x * kWarpSize + threadIdx.x;
  float s = 0.0f;
  if (j < OC) {
    for (int c = threadIdx.y; c < chunks; c += kGroups) {
      s += partials[static_cast<int64_t>(c) * OC + j];
    }
  }
  group_sums[threadIdx.y * kWarpSize + threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < OC) {
    float total = 0.0f;
    for (int g = 0; g < kGroups; ++g) total += group_sums[g * kWarpSize + threadIdx.x];
    dbias[j] += total;
  }
}

}  // namespace

size_t BiasGradScratchFloats(int N, int OC) {
  if (N <= 0 || OC <= 0) return 0;
  return static_cast<size_t>(Chunks(N, OC)) * static_cast<size_t>(OC);
}

template <typename T>
cudaError_t LaunchBiasGrad(float* dbias, const T* dout, float* scratch, int N, int OC,
                           cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return cudaSuccess;
  constexpr int kWide = kVec16<T>;
  const bool vec = OC % kWide == 0 && Aligned16(dout);
  const int chunks = Chunks(N, OC);
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  const dim3 block(kWarpSize, kGroups);
  cudaError_t err;
  if (vec) {
    const dim3 grid((OC + kWide * kWarpSize - 1) / (kWide * kWarpSize), chunks);
    err = Launch<ColumnPartialsKernel<T, kWide>>(grid, block,
                                                 sizeof(float) * kGroups * kWide * kWarpSize,
                                                 stream, scratch, dout, N, OC, rows_per_chunk);
  } else {
    const dim3 grid((OC + kWarpSize - 1) / kWarpSize, chunks);
    err = Launch<ColumnPartialsKernel<T, 1>>(grid, block, sizeof(float) * kGroups * kWarpSize,
                                             stream, scratch, dout, N, OC, rows_per_chunk);
  }
  if (err != cudaSuccess) return err;
  return Launch<SumChunksKernel>((OC + kWarpSize - 1) / kWarpSize, block,
                                 sizeof(float) * kGroups * kWarpSize, stream, dbias, scratch,
                                 chunks, OC);
}

template cudaError_t LaunchBiasGrad<float>(float*, const float*, float*, int, int, cudaStream_t);
template cudaError_t LaunchBiasGrad<__nv_bfloat16>(float*, const __nv_bfloat16*, float*, int, int,
                                                   cudaStream_t);

LADDER_KERNELS_END
