// Tensor-core building blocks for bf16 kernels: the warp-wide matrix
// multiply-accumulate mma.sync m16n8k16 (bf16 inputs, fp32 accumulators),
// ldmatrix (shared memory -> mma fragments) and cp.async (global -> shared
// memory without passing through registers, for double buffering). Each
// function is defined once for both compilations (kernels/launch.cuh rule 4):
// inline PTX under nvcc, the simulator's emulation (src/backend/cuda_sim/
// tensor_core.h, which states what it checks) under -DLADDER_CUDA_SIM.
//
// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 --------------------
// D[16x8] = A[16x16] * B[16x8] + C[16x8], computed by a whole warp: all 32
// lanes execute it together (.aligned), each holding a fragment of every
// matrix in registers. With g = lane / 4 ("groupID") and t = lane % 4
// ("threadID_in_group"), the PTX ISA's layouts are (element pairs are packed
// in one 32-bit register, the lower-numbered element in the low half):
//
//   A (row-major 16x16, 4 regs a[0..3] = elements a0..a7):
//     a[0] = A[g    ][2t, 2t+1]        a[2] = A[g    ][2t+8, 2t+9]
//     a[1] = A[g + 8][2t, 2t+1]        a[3] = A[g + 8][2t+8, 2t+9]
//   B (16x8, "col": consecutive k of one column n per register; 2 regs):
//     b[0] = B[2t, 2t+1][g]            b[1] = B[2t+8, 2t+9][g]
//   C and D (fp32, 4 regs):
//     c[0], c[1] = C[g][2t], C[g][2t+1]     c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
//
// So lane l sees row g of every 8-row slab and the column pair 2t, 2t+1;
// the four lanes of a group (l = 4g .. 4g+3) together hold whole rows.
// Products of bf16 values are exact in fp32; the hardware's summation order
// and internal rounding are unspecified (the simulator adds in k order in
// fp32), so GPU and simulator may differ in the last bits: compare with a
// tolerance that scales with sum_k |A[m][k] * B[k][n]|.
//
// ---- ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 --------------
// Loads 1, 2 or 4 8x8 matrices of 16-bit elements from shared memory into
// fragments, one register per matrix per lane. Every row is 16 contiguous
// bytes at a 16-byte aligned address that one lane supplies: lanes 8i..8i+7
// give the addresses of rows 0..7 of matrix i (for .x1 only lanes 0-7 are
// used, for .x2 lanes 0-15; the others' addresses are ignored). Lane l then
// receives in r[i] the elements (row l/4, cols 2(l%4), 2(l%4)+1) of matrix i;
// with .trans, those of the transposed matrix: (rows 2(l%4), 2(l%4)+1,
// col l/4). That is exactly the mma layout above:
//   - A, row-major [m][k] in shared memory: LdMatrixX4 with lane l pointing at
//     row (l % 16), column 8 * (l / 16) of the 16x16 tile yields a[0..3]
//     (matrices: rows 0-7/k 0-7, rows 8-15/k 0-7, rows 0-7/k 8-15, rows
//     8-15/k 8-15).
//   - B stored as B^T, [n][k] (an "n-major" operand such as K in Q K^T):
//     LdMatrixX2 with lane l pointing at row n = l % 8, column k = 8 * (l / 8)
//     yields b[0..1]; LdMatrixX4 gives two adjacent n-tiles at once.
//   - B stored row-major, [k][n] (such as V in P V): LdMatrixX2Trans with lane
//     l pointing at row k = l % 16, column n = 0 yields b[0..1].
//
// ---- cp.async.cg.shared.global (16 bytes), commit_group, wait_group N -------
// CpAsync16 starts a 16-byte copy from global to shared memory (both 16-byte
// aligned) and returns at once. CpAsyncCommit closes the thread's copies
// issued since the last commit into a group; CpAsyncWait<N>() waits until at
// most the N most recent groups of this thread are still in flight. The
// copied data is visible to the issuing thread after the wait, and to other
// threads after the wait and a barrier (__syncthreads). Double buffering:
// issue tile k+1, commit, wait<1> (tile k has landed), __syncthreads, compute
// on tile k, __syncthreads (before the buffer is refilled). The simulator
// copies only at the wait and poisons the destination at issue, so a read
// that forgets to wait sees NaN.
//
// ---- bf16 pairs ---------------------------------------------------------------
// PackBf16x2(lo, hi) rounds two floats to bf16 (to nearest, ties to even, as
// src/core/bf16.h's FloatToBf16 and cvt.rn.bf16x2.f32) into one register, lo
// in the low half. Note PTX's operand order: `cvt.rn.bf16x2.f32 d, a, b` puts
// a in the UPPER half. UnpackBf16x2 widens a register back (exact).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

#if defined(LADDER_CUDA_SIM)
#include "src/backend/cuda_sim/tensor_core.h"
#include "src/core/bf16.h"
#endif

LADDER_KERNELS_BEGIN

#if defined(LADDER_CUDA_SIM)

__device__ __forceinline__ void MmaBf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                              const float c[4]) {
  ::ladder::cuda_sim::MmaM16N8K16Bf16(d, a, b, c);
}
__device__ __forceinline__ void LdMatrixX1(uint32_t r[1], const void* row) {
  ::ladder::cuda_sim::LdMatrix(1, false, r, row);
}
__device__ __forceinline__ void LdMatrixX2(uint32_t r[2], const void* row) {
  ::ladder::cuda_sim::LdMatrix(2, false, r, row);
}
__device__ __forceinline__ void LdMatrixX4(uint32_t r[4], const void* row) {
  ::ladder::cuda_sim::LdMatrix(4, false, r, row);
}
__device__ __forceinline__ void LdMatrixX1Trans(uint32_t r[1], const void* row) {
  ::ladder::cuda_sim::LdMatrix(1, true, r, row);
}
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t r[2], const void* row) {
  ::ladder::cuda_sim::LdMatrix(2, true, r, row);
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t r[4], const void* row) {
  ::ladder::cuda_sim::LdMatrix(4, true, r, row);
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  ::ladder::cuda_sim::CpAsync16(smem, gmem);
}
__device__ __forceinline__ void CpAsyncCommit() { ::ladder::cuda_sim::CpAsyncCommitGroup(); }
template <int kN>
__device__ __forceinline__ void CpAsyncWait() {
  static_assert(kN >= 0 && kN <= 7, "cp.async.wait_group takes 0..7");
  ::ladder::cuda_sim::CpAsyncWaitGroup(kN);
}
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  return uint32_t{::ladder::FloatToBf16(lo)} | uint32_t{::ladder::FloatToBf16(hi)} << 16;
}

#else  // nvcc

// The shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void MmaBf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                              const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void LdMatrixX1(uint32_t r[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX2(uint32_t r[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX4(uint32_t r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX1Trans(uint32_t r[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t r[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
// The "memory" clobbers keep the compiler from moving shared-memory accesses
// across the copy's start, its commit and its wait.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(SharedAddress(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kN>
__device__ __forceinline__ void CpAsyncWait() {
  static_assert(kN >= 0 && kN <= 7, "cp.async.wait_group takes 0..7");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory");
}
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));  // first source: upper
  return r;
}

#endif

// The two bf16 of a register as floats (exact): .x the low half, .y the high.
__device__ __forceinline__ float2 UnpackBf16x2(uint32_t x) {
  return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
}

LADDER_KERNELS_END
