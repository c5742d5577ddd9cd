// The CUDA simulator's tensor-core instructions: the simulated twins of the
// inline PTX in kernels/tensor_core.cuh, which is the only caller (kernels
// never use these names directly). The fragment layouts, the instructions'
// semantics and what a GPU may do differently are documented there; this
// header states what the simulator does and checks.
//
//  - MmaM16N8K16Bf16 (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32)
//    and LdMatrix (ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16)
//    are warp collectives like the shuffles of device.h: all 32 lanes of the
//    warp must arrive at the same instruction (same variant); a lane that
//    exited or waits elsewhere fails the launch (cudaErrorIllegalInstruction)
//    naming the lane, as a shuffle with a partial mask does. A warp of fewer
//    than 32 threads (the block's last, partial warp) cannot use them.
//  - mma: each lane's D fragment is computed from all 32 lanes' A, B and C
//    fragments exactly per the PTX layouts. bf16 x bf16 products are exact in
//    fp32; they are added to c in k order in fp32 (round to nearest). A GPU
//    adds them in an unspecified order and internal precision: results may
//    differ in the last bits, so tests compare with a tolerance. NaN in any
//    input of a dot product (poisoned shared memory) gives NaN.
//  - ldmatrix: every row address that the variant uses (lanes 0-7, 0-15 or
//    0-31 for .x1, .x2, .x4) must be 16-byte aligned (else
//    cudaErrorMisalignedAddress) and its 16 bytes must lie in the block's
//    dynamic shared memory (else cudaErrorIllegalAddress); the message names
//    the lane that gave the address. Shared memory nothing wrote reads as
//    the simulator's poison (NaN as bf16).
//  - cp.async (CpAsync16, CpAsyncCommitGroup, CpAsyncWaitGroup) is per
//    thread. At issue the simulator checks the operands (a 16-byte aligned
//    destination inside the block's dynamic shared memory, a 16-byte aligned
//    source inside one device allocation) and fills the destination with
//    poison; the copy itself happens only when a cp.async.wait_group that
//    covers its group runs in the issuing thread (wait_group N completes all
//    but the N most recent committed groups; copies not yet committed are not
//    waited for). A kernel that reads the destination before waiting, or
//    waits for too few groups, reads NaN instead of stale or racing data.
//    Copies still pending when a thread exits are dropped (the block's shared
//    memory ends with it).
#pragma once

#include <cstdint>

namespace ladder {
namespace cuda_sim {

// D = A * B + C for the warp; the fragments of the calling lane (d may alias c).
void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// ldmatrix of `num` (1, 2 or 4) 8x8 b16 matrices; `row` is the calling lane's
// row address, r receives num registers.
void LdMatrix(int num, bool trans, uint32_t* r, const void* row);
// cp.async.cg.shared.global of 16 bytes, commit_group and wait_group n.
void CpAsync16(void* smem, const void* gmem);
void CpAsyncCommitGroup();
void CpAsyncWaitGroup(int n);

namespace internal {

// One lane's operands of an m16n8k16 mma.
struct MmaFragments {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};

// The warp's mma from the 32 lanes' fragments: in[l] are lane l's operands,
// d[l] receives lane l's 4 results. Pure (no simulator state): the layouts.
void MmaM16N8K16Bf16Warp(const MmaFragments* const in[32], float* const d[32]);

// The warp's ldmatrix from the row addresses rows[l] (lanes 0 to 8 * num - 1,
// already checked): r[l] receives lane l's num registers.
void LdMatrixWarp(int num, bool trans, const void* const rows[32], uint32_t* const r[32]);

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
