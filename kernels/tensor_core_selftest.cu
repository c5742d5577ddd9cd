// Test kernels for kernels/tensor_core.cuh (launchers and contract in
// tensor_core_selftest.h). They follow the layouts documented in the .cuh
// literally, so a wrong layout in the simulator or a wrong operand order in
// the inline PTX shows up as a wrong product in tests/gpu/tensor_core_test.cc.
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/tensor_core.cuh"
#include "kernels/tensor_core_selftest.h"

LADDER_KERNELS_BEGIN
namespace {

// ---- one mma, every way of loading its fragments ------------------------------

// Offsets (in bf16 elements) of the operand buffer's parts, in global and in
// shared memory alike.
constexpr int kOffA = 0, kOffAt = 256, kOffBt = 512, kOffB = 640;

__global__ void __launch_bounds__(kWarpSize)
    FragmentKernel(float* __restrict__ d, const uint16_t* __restrict__ ops,
                   const float* __restrict__ c, int load) {
  const int lane = static_cast<int>(threadIdx.x);
  const int g = lane >> 2, t = lane & 3;
  uint32_t a[4], b[2];
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];

  if (load == static_cast<int>(TensorCoreLoad::kDirect)) {
    // a[i] = A[g + 8 (i & 1)][2t + 8 (i >> 1) + {0, 1}], b[i] = B^T[g][2t + 8i + {0, 1}].
    const uint32_t* A = reinterpret_cast<const uint32_t*>(ops + kOffA);
    const uint32_t* Bt = reinterpret_cast<const uint32_t*>(ops + kOffBt);
    for (int i = 0; i < 4; ++i) a[i] = A[((g + 8 * (i & 1)) * 16 + 2 * t + 8 * (i >> 1)) / 2];
    for (int i = 0; i < 2; ++i) b[i] = Bt[(g * 16 + 2 * t + 8 * i) / 2];
  } else {
    uint16_t* s = DynamicShared<uint16_t>();
    // 1536 bytes: 96 chunks of 16, three per lane.
    for (int chunk = lane; chunk < kTensorCoreOperandElems / 8; chunk += kWarpSize) {
      CpAsync16(s + 8 * chunk, ops + 8 * chunk);
    }
    CpAsyncCommit();
    CpAsyncWait<0>();
    __syncwarp();
    const int i = lane >> 3, j = lane & 7;  // the matrix and row this lane addresses
    // Matrix i of A (rows m 8 (i & 1), k 8 (i >> 1)) is rows k 8 (i >> 1) .. +7,
    // columns m 8 (i & 1) .. +7 of A^T.
    const uint16_t* a_row = s + kOffA + (lane & 15) * 16 + 8 * (lane >> 4);
    const uint16_t* at_row = s + kOffAt + (j + 8 * (i >> 1)) * 16 + 8 * (i & 1);
    const uint16_t* bt_row = s + kOffBt + j * 16 + 8 * (i & 1);  // lanes 0-15
    const uint16_t* b_row = s + kOffB + (lane & 15) * 8;         // lanes 0-15
    switch (static_cast<TensorCoreLoad>(load)) {
      case TensorCoreLoad::kX4X2:
        LdMatrixX4(a, a_row);
        LdMatrixX2(b, bt_row);
        break;
      case TensorCoreLoad::kX4TransX2:
        LdMatrixX4Trans(a, at_row);
        LdMatrixX2(b, bt_row);
        break;
      case TensorCoreLoad::kX1X2Trans:
        for (int m = 0; m < 4; ++m) {
          LdMatrixX1(&a[m], s + kOffA + (j + 8 * (m & 1)) * 16 + 8 * (m >> 1));
        }
        LdMatrixX2Trans(b, b_row);
        break;
      default:  // kX1TransX1
        for (int m = 0; m < 4; ++m) {
          LdMatrixX1Trans(&a[m], s + kOffAt + (j + 8 * (m >> 1)) * 16 + 8 * (m & 1));
        }
        for (int m = 0; m < 2; ++m) LdMatrixX1(&b[m], s + kOffBt + j * 16 + 8 * m);
        break;
    }
  }
  MmaBf16_16816(acc, a, b, acc);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = acc[i];
}

// ---- a tiled GEMM with cp.async double buffering ------------------------------

constexpr int kTile = 64;   // block tile: 64 x 64 outputs
constexpr int kTileK = 32;  // k per stage
constexpr int kLd =
    kTileK + 8;  // shared row stride in elements (80 bytes: 16-aligned, skewed banks)
constexpr int kStageElems = 2 * kTile * kLd;  // A tile then B^T tile
constexpr int kGemmThreads = 4 * kWarpSize;
constexpr size_t kGemmShared = 2 * kStageElems * sizeof(uint16_t);

// Copies the A and B^T tiles of k-tile kt into `stage`: 2 x 64 rows of 4
// chunks of 16 bytes, two of each per thread.
__device__ __forceinline__ void LoadStage(uint16_t* stage, const uint16_t* __restrict__ a,
                                          const uint16_t* __restrict__ bt, int m0, int n0, int K,
                                          int kt) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int c = tid; c < kTile * 4; c += kGemmThreads) {
    const int row = c >> 2, col = (c & 3) * 8;
    CpAsync16(stage + row * kLd + col, a + static_cast<size_t>(m0 + row) * K + kt * kTileK + col);
    CpAsync16(stage + (kTile + row) * kLd + col,
              bt + static_cast<size_t>(n0 + row) * K + kt * kTileK + col);
  }
}

// Grid (N / 64, M / 64), 4 warps in 2 x 2, each a 32 x 32 tile of d: 2 x 4 mma
// tiles of 16 x 8.
__global__ void __launch_bounds__(kGemmThreads)
    GemmKernel(float* __restrict__ d, const uint16_t* __restrict__ a,
               const uint16_t* __restrict__ bt, int N, int K) {
  uint16_t* smem = DynamicShared<uint16_t>();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int m0 = static_cast<int>(blockIdx.y) * kTile, n0 = static_cast<int>(blockIdx.x) * kTile;
  const int i = lane >> 3, j = lane & 7;
  float acc[2][4][4] = {};

  const int k_tiles = K / kTileK;
  LoadStage(smem, a, bt, m0, n0, K, 0);
  CpAsyncCommit();
  for (int kt = 0; kt < k_tiles; ++kt) {
    if (kt + 1 < k_tiles) LoadStage(smem + ((kt + 1) & 1) * kStageElems, a, bt, m0, n0, K, kt + 1);
    CpAsyncCommit();   // possibly empty: keeps "the most recent group" = tile kt + 1
    CpAsyncWait<1>();  // tile kt has landed (this thread's part)
    __syncthreads();   // ... and every thread's
    const uint16_t* sa = smem + (kt & 1) * kStageElems;
    const uint16_t* sb = sa + kTile * kLd;
#pragma unroll
    for (int ks = 0; ks < kTileK; ks += 16) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        LdMatrixX4(af[mi], sa + (wm * 32 + mi * 16 + (lane & 15)) * kLd + ks + 8 * (lane >> 4));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        // Matrices: n 0-7/k 0-7, n 0-7/k 8-15, n 8-15/k 0-7, n 8-15/k 8-15.
        uint32_t r[4];
        LdMatrixX4(r, sb + (wn * 32 + np * 16 + j + 8 * (i >> 1)) * kLd + ks + 8 * (i & 1));
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) MmaBf16_16816(acc[mi][ni], af[mi], bf[ni], acc[mi][ni]);
      }
    }
    __syncthreads();  // the stage is refilled two iterations on
  }
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm * 32 + mi * 16 + g + 8 * (e >> 1);
        const int col = n0 + wn * 32 + ni * 8 + 2 * t + (e & 1);
        d[static_cast<size_t>(row) * N + col] = acc[mi][ni][e];
      }
    }
  }
}

// ---- bf16 pairs ------------------------------------------------------------------

__global__ void PackKernel(uint32_t* __restrict__ out, const float* __restrict__ in, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] = PackBf16x2(in[2 * i], in[2 * i + 1]);
    // The round trip through UnpackBf16x2 must give the same bits back.
    const float2 f = UnpackBf16x2(out[i]);
    if (PackBf16x2(f.x, f.y) != out[i]) out[i] = 0xdeadbeefu;
  }
}

}  // namespace

cudaError_t LaunchTensorCorePackTest(uint32_t* out, const float* in, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Launch<PackKernel>((n + 255) / 256, 256, 0, stream, out, in, n);
}

cudaError_t LaunchTensorCoreFragmentTest(float* d, const uint16_t* operands, const float* c,
                                         TensorCoreLoad load, cudaStream_t stream) {
  return Launch<FragmentKernel>(1, kWarpSize, kTensorCoreOperandElems * sizeof(uint16_t), stream, d,
                                operands, c, static_cast<int>(load));
}

cudaError_t LaunchTensorCoreGemmTest(float* d, const uint16_t* a, const uint16_t* bt, int M, int N,
                                     int K, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(N / kTile), static_cast<unsigned>(M / kTile));
  return Launch<GemmKernel>(grid, kGemmThreads, kGemmShared, stream, d, a, bt, N, K);
}

LADDER_KERNELS_END
