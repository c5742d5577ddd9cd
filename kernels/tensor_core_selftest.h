// Launchers of kernels/tensor_core_selftest.cu: small kernels that exercise
// kernels/tensor_core.cuh (mma.sync m16n8k16 bf16, every ldmatrix variant,
// cp.async double buffering) so tests/gpu/tensor_core_test.cc can compare
// them with plain matrix products, on a GPU and on the simulator. Not used
// by the trainer. bf16 operands are raw bits (src/core/bf16.h); device
// pointers 16-byte aligned; work enqueued on `stream`, the launch error
// returned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// How the fragment test loads A and B.
enum class TensorCoreLoad : int {
  kDirect = 0,     // from global memory, element by element per the mma layout
  kX4X2 = 1,       // A: ldmatrix.x4 of A; B: ldmatrix.x2 of B^T
  kX4TransX2 = 2,  // A: ldmatrix.x4.trans of A^T; B: ldmatrix.x2 of B^T
  kX1X2Trans = 3,  // A: four ldmatrix.x1 of A; B: ldmatrix.x2.trans of B
  kX1TransX1 = 4,  // A: four ldmatrix.x1.trans of A^T; B: two ldmatrix.x1 of B^T
};
// Every .trans load meets a plain one in its mma: if both operands came
// through the same wrong transpose, a permutation of k common to A and B
// would leave the product unchanged and hide the error.

// Bf16 elements of the fragment test's operand buffer:
// [A 16x16 row-major | A^T 16x16 row-major | B^T 8x16 row-major | B 16x8 row-major].
inline constexpr int kTensorCoreOperandElems = 256 + 256 + 128 + 128;

// One warp: d [16x8] = A [16x16] * B [16x8] + c [16x8] (fp32, row-major) by
// one mma.sync, the operands copied to shared memory with cp.async (except
// kDirect) and loaded as `load` says.
cudaError_t LaunchTensorCoreFragmentTest(float* d, const uint16_t* operands, const float* c,
                                         TensorCoreLoad load, cudaStream_t stream);

// d [M, N] (fp32) = a [M, K] (bf16, row-major) * b, with b given as
// bt [N, K] (bf16, row-major: B's columns contiguous). M and N multiples of
// 64, K a multiple of 32. Blocks of 4 warps compute 64x64 tiles; A and B
// tiles of 32 k reach shared memory by cp.async, double-buffered.
cudaError_t LaunchTensorCoreGemmTest(float* d, const uint16_t* a, const uint16_t* bt, int M, int N,
                                     int K, cudaStream_t stream);

// out[i] = PackBf16x2(in[2i], in[2i + 1]) for i < n: two floats rounded to
// bf16 (nearest, ties to even), in[2i] in the low half.
cudaError_t LaunchTensorCorePackTest(uint32_t* out, const float* in, int n, cudaStream_t stream);

LADDER_KERNELS_END
