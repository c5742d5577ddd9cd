// Prefill with packed weights (bf16, int8): y [N,OC] = x [N,C] @ W^T + bias
// for N > kSmallBatch tokens (matmul_kernels.h).
//
// Why: a prompt of hundreds of tokens multiplies each weight by every token,
// so prefill is compute-bound and the packed format's bytes no longer matter;
// what matters is reaching the machine's GEMM rate, which a BLAS sgemm's
// cache blocking does and a kernel built to stream weights (int8_matmul.cc,
// small_matmul.cc) does not. So a tile of rows of W is widened to fp32 into
// a buffer about the size of a core's L2 (the widening reads R x C packed
// values and writes R x C floats, against 2 N R C FLOPs of multiply: at
// N = 64 a 1/128 share of the work), and sgemm multiplies all N tokens by
// it, writing the tile's columns of y in place (ldc = OC). The activations
// stay fp32, which is more precise than the W8A8 small-batch kernel, not less.
//
// Threads: all threads widen the tile (each a run of its rows), then sgemm
// runs on the same OpenMP pool. One buffer per calling thread, reused: the
// widening is too cheap to be worth overlapping with the multiply.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/matmul_kernels.h"

namespace ladder::cpu {

void DequantizedSgemm(const float* x, int64_t N, int64_t C, int64_t OC, int64_t row_multiple,
                      const DequantizeTile& tile, const float* bias, float* y) {
  // About 1 MiB of fp32 per tile: large enough that sgemm's packing of x
  // (N x C, once per tile) stays a small share of its multiply, small
  // enough to sit in the last-level cache while it is multiplied.
  constexpr int64_t kTileBytes = int64_t{1} << 20;
  const int64_t rows_per_tile =
      std::max<int64_t>(1, kTileBytes / (4 * C) / row_multiple) * row_multiple;
  static thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(std::min(rows_per_tile, OC) * C));
  float* wt = buffer.data();
  for (int64_t r0 = 0; r0 < OC; r0 += rows_per_tile) {
    const int64_t rows = std::min(rows_per_tile, OC - r0);
    const int64_t pieces = (rows + row_multiple - 1) / row_multiple;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t at = p * row_multiple, n = std::min(row_multiple, rows - at);
      tile(r0 + at, n, wt + at * C);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N),
                static_cast<int>(rows), static_cast<int>(C), 1.0f, x, static_cast<int>(C), wt,
                static_cast<int>(C), 0.0f, y + r0, static_cast<int>(OC));
  }
  if (bias != nullptr) AddBias(y, N, OC, bias);
}

}  // namespace ladder::cpu
