// The fragment arithmetic of the simulator's tensor-core instructions
// (tensor_core.h): which lane holds which element, per the PTX ISA's figures
// for mma.m16n8k16 (.bf16, .f32 accumulators) and ldmatrix.m8n8.b16.
#include "src/backend/cuda_sim/tensor_core.h"

#include <cstring>

#include "src/core/bf16.h"

namespace ladder {
namespace cuda_sim {
namespace internal {

namespace {
float Lo(uint32_t x) { return Bf16ToFloat(static_cast<bf16>(x & 0xffffu)); }
float Hi(uint32_t x) { return Bf16ToFloat(static_cast<bf16>(x >> 16)); }
}  // namespace

void MmaM16N8K16Bf16Warp(const MmaFragments* const in[32], float* const d[32]) {
  // Assemble the matrices: A [16][16] (row), B [16][8] (k x n), C [16][8].
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaFragments& f = *in[lane];
    const int g = lane >> 2, t = lane & 3;
    // a0,a1: (g, 2t..2t+1); a2,a3: (g+8, ..); a4,a5: (g, 2t+8..); a6,a7: (g+8, 2t+8..).
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1);
      const int col = 2 * t + 8 * (i >> 1);
      A[row][col] = Lo(f.a[i]);
      A[row][col + 1] = Hi(f.a[i]);
    }
    // b0,b1: (2t..2t+1, g); b2,b3: (2t+8.., g).
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = Lo(f.b[i]);
      B[2 * t + 8 * i + 1][g] = Hi(f.b[i]);
    }
    // c0,c1: (g, 2t..2t+1); c2,c3: (g+8, 2t..2t+1).
    for (int i = 0; i < 4; ++i) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = f.c[i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      // Products of bf16 values are exact in fp32; the sum is fp32, in k order.
      float acc = C[row][col];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      d[lane][i] = acc;
    }
  }
}

void LdMatrixWarp(int num, bool trans, const void* const rows[32], uint32_t* const r[32]) {
  // Matrix m's row j (8 b16 elements) lies at rows[8 * m + j].
  auto element = [&](int m, int row, int col) {
    uint16_t e;
    std::memcpy(&e, static_cast<const char*>(rows[8 * m + row]) + 2 * col, 2);
    return uint32_t{e};
  };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int m = 0; m < num; ++m) {
      // Without .trans lane l holds (row l/4, cols 2(l%4), 2(l%4)+1); with
      // .trans the transpose: (rows 2(l%4), 2(l%4)+1, col l/4). Low half first.
      r[lane][m] = trans ? element(m, 2 * t, g) | element(m, 2 * t + 1, g) << 16
                         : element(m, g, 2 * t) | element(m, g, 2 * t + 1) << 16;
    }
  }
}

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
