// The CPU backend's linear-layer kernels below the op interface, shared by
// matmul.cc (fp32 and bf16 weights) and int8_matmul.cc. Which one a call
// takes depends on its number of tokens N, because that decides what bounds
// it (2 FLOPs per weight per token):
//
//   N <= kSmallBatch   memory-bound: each weight is read once and used by N
//                      tokens, too few to hide the read behind arithmetic.
//                      ladder's own SIMD kernels stream the weights at the
//                      memory's speed (small_matmul.cc; int8: int8_matmul.cc).
//   N >  kSmallBatch   compute-bound: a BLAS sgemm's cache blocking wins.
//                      Packed weights (bf16, int8) are widened a tile of
//                      rows at a time into a cache-sized fp32 buffer that
//                      sgemm multiplies (tiled_sgemm.cc), so prefill runs at
//                      the sgemm's rate whatever the storage format.
//                      Except int8 with AVX-512 VNNI (Int8KernelMaxTokens):
//                      there the integer kernel outruns sgemm at any N.
//
// All functions run on the calling thread's OpenMP pool and must be called
// outside a parallel region; shapes are checked by the ops that call them.
#pragma once

#include <cstdint>
#include <functional>

#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/core/bf16.h"

namespace ladder::cpu {

inline constexpr int64_t kSmallBatch = 16;

// How far ahead of the weights it is about to use a one-token kernel asks
// for the next ones, in bytes (about one row of a 768-wide bf16 matrix): the
// hardware prefetcher alone left the bf16 rows of small_matmul.cc and the
// int8 panels of int8_matmul.cc short of the read bandwidth (each file has
// its figures).
inline constexpr int64_t kStreamPrefetchBytes = 1536;

// int8 weights go through the integer W8A8 kernel (int8_matmul.cc) up to
// this many tokens, and through the widened sgemm above. With AVX-512 VNNI
// one instruction does 64 int8 multiply-adds, four times an fp32 FMA's 16,
// and the integer kernel stays ahead of sgemm at every prefill size
// measured (docs/results.md), so it takes every N, as the CUDA backend's
// does; the other levels switch at kSmallBatch.
int64_t Int8KernelMaxTokens(CpuIsa isa);

// y [N, OC] = x [N, C] @ W^T + bias (bias may be null), W [OC, C] row-major
// in float or bf16. Every ISA level (cpu_isa.h) computes, for each (n, o),
// the same sequence, so results are bit-identical across levels, tiles,
// batch sizes and thread counts:
//   1. 64 lanes: lane l accumulates w[o, c] * x[n, c] with fma over the
//      channels c = 64 k + l, k = 0, 1, ... in order (C rounded down to 64);
//   2. the lanes fold pairwise: l + (l + 32), then + 16, + 8, + 4, + 2, + 1
//      (the last three are Avx2::Sum's and Avx512::Sum's tree, simd.h);
//   3. the last C % 64 channels join with fma, in order; then + bias[o].
// Any N works; it is fast for N <= kSmallBatch.
void SmallMatmul(const float* x, int64_t N, int64_t C, const float* w, int64_t OC,
                 const float* bias, float* y);
void SmallMatmul(const float* x, int64_t N, int64_t C, const bf16* w, int64_t OC, const float* bias,
                 float* y);

// Writes rows [r0, r0 + rows) of a packed [OC, C] weight matrix as fp32,
// row-major, to dst [rows, C]. Called from inside a parallel region (one
// thread per call): it must not start threads of its own.
using DequantizeTile = std::function<void(int64_t r0, int64_t rows, float* dst)>;

// y [N, OC] = x [N, C] @ W^T + bias (bias may be null) for a packed W given
// by `tile`: tiles of rows are widened to fp32 (in parallel) and multiplied
// by cblas_sgemm. Tile rows are a multiple of `row_multiple` (the packing's
// panel height, 1 for row-major).
void DequantizedSgemm(const float* x, int64_t N, int64_t C, int64_t OC, int64_t row_multiple,
                      const DequantizeTile& tile, const float* bias, float* y);

// y [N, OC] += bias [OC] on every row.
inline void AddBias(float* y, int64_t N, int64_t OC, const float* bias) {
#pragma omp parallel for schedule(static) if (N * OC >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    float* o = y + n * OC;
    for (int64_t j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

}  // namespace ladder::cpu
