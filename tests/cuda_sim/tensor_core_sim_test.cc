// The simulator's tensor-core instructions (src/backend/cuda_sim/
// tensor_core.h) fail as their contract promises when a kernel misuses them:
// an mma.sync or ldmatrix that a lane of the warp never reaches (it exited,
// or waits at another variant), a partial warp, an ldmatrix row address that
// is misaligned or outside the block's shared memory, and a cp.async whose
// destination is read before cp.async.wait_group covers it (it reads NaN, so
// a missing or too-short wait fails the kernel's test). The products
// themselves are checked against the host in tests/gpu/tensor_core_test.cc.
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/launch.cuh"
#include "kernels/tensor_core.cuh"
#include "tests/cuda_sim/sim_test.h"

namespace ladder {
namespace {

using kernels::CpAsync16;
using kernels::CpAsyncCommit;
using kernels::CpAsyncWait;
using kernels::DynamicShared;
using kernels::Launch;
using kernels::LdMatrixX1;
using kernels::LdMatrixX2;
using kernels::LdMatrixX4;
using kernels::MmaBf16_16816;

using TensorCoreSimTest = SimDeviceTest;

void ExpectMessage(cudaError_t err, std::initializer_list<const char*> parts) {
  const std::string msg = cudaGetErrorString(err);
  for (const char* p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
}

// out[lane * 4 + i] = D of A = B = 1 (bf16 0x3f80), C = lane: 16 + lane.
// With `skip_lane` >= 0 that lane returns before the mma.
__global__ void OnesMma(float* out, int skip_lane) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == skip_lane) return;
  const uint32_t one2 = 0x3f803f80u;
  const uint32_t a[4] = {one2, one2, one2, one2}, b[2] = {one2, one2};
  float c[4] = {1.0f * lane, 1.0f * lane, 1.0f * lane, 1.0f * lane};
  MmaBf16_16816(c, a, b, c);
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = c[i];
}

TEST_F(TensorCoreSimTest, MmaOfTheFullWarpWorks) {
  float* out = Alloc<float>(64 * 4);
  ASSERT_EQ((Launch<OnesMma>(1, 64, 0, nullptr, out, -1)), cudaSuccess);
  const std::vector<float> got = Get(out, 64 * 4);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(got[t * 4 + 3], 16.0f + t % 32) << t;
}

TEST_F(TensorCoreSimTest, MmaWithALaneMissingFailsNamingIt) {
  float* out = Alloc<float>(32 * 4);
  const cudaError_t err = Launch<OnesMma>(1, 32, 0, nullptr, out, 31);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  ExpectMessage(err, {"kernel OnesMma block (0,0,0) thread (0,0,0) (lane 0)",
                      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                      "lane 31 of the warp never arrives (it had exited)"});
}

TEST_F(TensorCoreSimTest, MmaInAPartialWarpFails) {
  float* out = Alloc<float>(48 * 4);
  const cudaError_t err = Launch<OnesMma>(1, 48, 0, nullptr, out, -1);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  ExpectMessage(err, {"thread (32,0,0) (lane 0)",
                      "needs all 32 lanes of the warp, and the block has only 16"});
}

// ldmatrix from shared memory with planted bugs:
//  0: none (x4 of a 512-byte region written first)
//  1: lane 5's row address is 8 bytes off alignment
//  2: lane 3's row address is the end of shared memory
//  3: lane 9 points into global memory
//  4: lanes 16-31 use .x2 while 0-15 use .x4
//  5: .x1, lanes 8-31 pass null (ignored, as on a GPU)
//  6: nothing written to shared memory first (poison: NaN)
__global__ void LoadMatrix(uint32_t* out, float* global, int bug) {
  uint16_t* s = DynamicShared<uint16_t>();
  const int lane = static_cast<int>(threadIdx.x);
  if (bug != 6) {
    for (int i = lane; i < 256; i += 32) s[i] = static_cast<uint16_t>(i);
  }
  __syncwarp();
  const char* row = reinterpret_cast<const char*>(s) + 16 * lane;
  if (bug == 1 && lane == 5) row += 8;
  if (bug == 2 && lane == 3) row = reinterpret_cast<const char*>(s) + 512;
  if (bug == 3 && lane == 9) row = reinterpret_cast<const char*>(global);
  uint32_t r[4] = {0, 0, 0, 0};
  if (bug == 5) {
    LdMatrixX1(r, lane < 8 ? row : nullptr);
  } else if (bug == 4 && lane >= 16) {
    LdMatrixX2(r, row);
  } else {
    LdMatrixX4(r, row);
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

TEST_F(TensorCoreSimTest, LdMatrixDeliversThePtxLayout) {
  uint32_t* out = Alloc<uint32_t>(128);
  float* global = Alloc<float>(4);
  ASSERT_EQ((Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 0)), cudaSuccess);
  const std::vector<uint32_t> got = Get(out, 128);
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < 4; ++m) {
      // Matrix m, row lane / 4, columns 2 (lane % 4) + {0, 1}; element e of
      // shared memory holds e, and row j of matrix m starts at element 8 (8m + j).
      const uint32_t e = 8 * (8 * m + lane / 4) + 2 * (lane % 4);
      EXPECT_EQ(got[lane * 4 + m], e | (e + 1) << 16) << "lane " << lane << " matrix " << m;
    }
  }
  ASSERT_EQ((Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 5)), cudaSuccess);
  const uint32_t e13 = 8 * (13 / 4) + 2 * (13 % 4);  // lane 13's pair of matrix 0
  EXPECT_EQ(Get(out, 128)[4 * 13], e13 | (e13 + 1) << 16);
}

TEST_F(TensorCoreSimTest, LdMatrixMisalignedRowFails) {
  uint32_t* out = Alloc<uint32_t>(128);
  float* global = Alloc<float>(4);
  const cudaError_t err = Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 1);
  ASSERT_EQ(err, cudaErrorMisalignedAddress);
  ExpectMessage(err, {"kernel LoadMatrix block (0,0,0) thread (5,0,0) (lane 5)",
                      "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "(row 5 of matrix 0)",
                      "is not 16-byte aligned"});
}

TEST_F(TensorCoreSimTest, LdMatrixOutsideSharedMemoryFails) {
  uint32_t* out = Alloc<uint32_t>(128);
  float* global = Alloc<float>(4);
  cudaError_t err = Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 2);
  ASSERT_EQ(err, cudaErrorIllegalAddress);
  ExpectMessage(err, {"thread (3,0,0) (lane 3)",
                      "not inside the block's 512 bytes of dynamic shared memory"});
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  out = Alloc<uint32_t>(128);
  global = Alloc<float>(4);
  err = Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 3);
  ASSERT_EQ(err, cudaErrorIllegalAddress);
  ExpectMessage(err, {"thread (9,0,0) (lane 9)", "(row 1 of matrix 1)"});
}

TEST_F(TensorCoreSimTest, LdMatrixVariantsMustAgree) {
  uint32_t* out = Alloc<uint32_t>(128);
  float* global = Alloc<float>(4);
  const cudaError_t err = Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 4);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  ExpectMessage(err, {"(lane 0): ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                      "lane 16 of the warp never arrives (it was waiting at "
                      "ldmatrix.sync.aligned.m8n8.x2.shared.b16"});
}

TEST_F(TensorCoreSimTest, LdMatrixOfUnwrittenSharedMemoryIsNaN) {
  uint32_t* out = Alloc<uint32_t>(128);
  float* global = Alloc<float>(4);
  ASSERT_EQ((Launch<LoadMatrix>(1, 32, 512, nullptr, out, global, 6)), cudaSuccess);
  for (uint32_t r : Get(out, 128)) {
    EXPECT_TRUE(std::isnan(std::bit_cast<float>(r << 16)) &&
                std::isnan(std::bit_cast<float>(r & 0xffff0000u)));
  }
}

// cp.async of 32 floats (8 chunks, one per lane of 0-7) from `src` to shared
// memory, then every lane 0-7 reads its chunk's first float back:
//  wait 0: commit, wait_group 0 (correct)
//  wait 1: commit, wait_group 1 (too short: the group is still in flight)
//  wait 2: no commit, no wait
//  wait 3: two groups (chunks of lanes 0-3 first, 4-7 second), wait_group 1:
//          the first has landed, the second not
// Shared memory was written with 7.0 before: a missing wait does not read
// stale data but the poison of a copy in flight. (Lanes 0-3 and 4-7 with
// wait 3 commit an extra empty group after or before their copy.)
__global__ void AsyncCopy(float* out, const float* src, int wait) {
  float* s = DynamicShared<float>();
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = 0; i < 4; ++i) s[4 * lane + i] = 7.0f;
  if (wait == 3 && lane >= 4) CpAsyncCommit();  // lanes 4-7: an empty first group
  CpAsync16(s + 4 * lane, src + 4 * lane);
  if (wait == 0 || wait == 1 || wait == 3) CpAsyncCommit();
  if (wait == 3 && lane < 4) CpAsyncCommit();  // lanes 0-3: an empty second group
  if (wait == 0) CpAsyncWait<0>();
  if (wait == 1 || wait == 3) CpAsyncWait<1>();
  out[lane] = s[4 * lane];
}

TEST_F(TensorCoreSimTest, CpAsyncLandsOnlyAtItsWait) {
  float* out = Alloc<float>(8);
  float* src = Alloc<float>(32);
  std::vector<float> host(32);
  for (int i = 0; i < 32; ++i) host[i] = static_cast<float>(i);
  Put(src, host);
  ASSERT_EQ((Launch<AsyncCopy>(1, 8, 128, nullptr, out, src, 0)), cudaSuccess);
  for (int l = 0; l < 8; ++l) EXPECT_EQ(Get(out, 8)[l], 4.0f * l);
  for (int wait : {1, 2}) {
    ASSERT_EQ((Launch<AsyncCopy>(1, 8, 128, nullptr, out, src, wait)), cudaSuccess);
    for (float v : Get(out, 8)) EXPECT_TRUE(std::isnan(v)) << "wait " << wait << ": " << v;
  }
  // Lanes 0-3 committed their copy as the older group, which wait_group 1
  // completes; lanes 4-7's copy is in the newest group, still in flight.
  ASSERT_EQ((Launch<AsyncCopy>(1, 8, 128, nullptr, out, src, 3)), cudaSuccess);
  const std::vector<float> got = Get(out, 8);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(got[l], 4.0f * l);
  for (int l = 4; l < 8; ++l) EXPECT_TRUE(std::isnan(got[l])) << l;
}

// cp.async with planted bugs: 1: the source runs past its allocation;
// 2: a misaligned destination; 3: the destination past shared memory.
__global__ void BadAsyncCopy(const float* src, int bug) {
  char* s = DynamicShared<char>();
  const int lane = static_cast<int>(threadIdx.x);
  const float* from = src + 4 * lane;
  char* to = s + 16 * lane;
  if (lane == 2) {
    if (bug == 1) from = src + 12;
    if (bug == 2) to += 4;
    if (bug == 3) to = s + 64;
  }
  CpAsync16(to, from);
  CpAsyncCommit();
  CpAsyncWait<0>();
}

TEST_F(TensorCoreSimTest, CpAsyncChecksItsAddresses) {
  struct Bug {
    int bug;
    cudaError_t code;
    const char* what;
  };
  for (const Bug& b : {Bug{1, cudaErrorIllegalAddress, "source's 16 bytes are not inside one"},
                       Bug{2, cudaErrorMisalignedAddress, "16-byte aligned"},
                       Bug{3, cudaErrorIllegalAddress, "not inside the block's 64 bytes"}}) {
    ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
    float* src = Alloc<float>(12);  // lanes 0-2 read 16 bytes each: 48 bytes
    const cudaError_t err = Launch<BadAsyncCopy>(1, 3, 64, nullptr, src, b.bug);
    ASSERT_EQ(err, b.code) << b.bug;
    ExpectMessage(err, {"kernel BadAsyncCopy block (0,0,0) thread (2,0,0)",
                        "cp.async.cg.shared.global", b.what});
  }
}

}  // namespace
}  // namespace ladder
