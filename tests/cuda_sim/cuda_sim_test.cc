// The CUDA simulator's own contract (src/backend/cuda_sim/runtime.h,
// device.h): kernels written here, in the kernels/ style, run through it.
// Each planted bug fails as the contract promises: an out-of-bounds write, a
// read of shared memory nothing wrote, a shuffle whose mask names a lane that
// never arrives, a barrier one thread skips, a host pointer handed to a
// kernel; and the things that must work do (barriers, every shuffle and vote,
// partial masks used correctly, shared-memory limits, sticky errors).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/launch.cuh"
#include "tests/cuda_sim/sim_test.h"

namespace ladder {
namespace {

using kernels::DynamicShared;
using kernels::Launch;

using CudaSimTest = SimDeviceTest;

// out[i] = i for i < n, one thread per element: writes one past the end when
// the launch has more threads than elements and forgets the bounds check.
__global__ void WriteIndex(float* out, int n, bool check) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (!check || i < n) out[i] = static_cast<float>(i);
}

TEST_F(CudaSimTest, OutOfBoundsWriteFailsNamingKernelAndThread) {
  float* out = Alloc<float>(100);
  ASSERT_EQ((Launch<WriteIndex>(4, 32, 0, nullptr, out, 100, true)), cudaSuccess);
  EXPECT_EQ(Get(out, 100)[99], 99.0f);

  // 128 threads, 100 floats: thread 100 (block 3, thread 4) writes 0 bytes
  // past the end, onto the guard page.
  const cudaError_t err = Launch<WriteIndex>(4, 32, 0, nullptr, out, 100, false);
  ASSERT_EQ(err, cudaErrorIllegalAddress);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("kernel WriteIndex"), std::string::npos) << msg;
  EXPECT_NE(msg.find("block (3,0,0) thread (4,0,0)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out-of-bounds write: 0 bytes past the end of a 400-byte"),
            std::string::npos)
      << msg;
  // Sticky, as on a GPU: every later call fails with it until a reset.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMemset(out, 0, 4), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A write into the rounding slack (a 10-float array is rounded up to 48
// bytes, so out[10] and out[11] lie before the guard page) is caught after
// the launch.
TEST_F(CudaSimTest, WriteIntoAlignmentSlackIsCaughtAfterTheLaunch) {
  float* out = Alloc<float>(10);
  const cudaError_t err = Launch<WriteIndex>(1, 11, 0, nullptr, out, 10, false);
  ASSERT_EQ(err, cudaErrorIllegalAddress);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("kernel WriteIndex: a write 0 bytes past the end of a 40-byte"),
            std::string::npos)
      << msg;
}

// Reads out[i] of a fresh allocation: the simulator hands out NaN.
__global__ void Copy(float* dst, const float* src, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) dst[i] = src[i];
}

TEST_F(CudaSimTest, FreshDeviceMemoryIsNaN) {
  float* a = Alloc<float>(8);
  float* b = Alloc<float>(8);
  ASSERT_EQ((Launch<Copy>(1, 8, 0, nullptr, b, a, 8)), cudaSuccess);
  for (float v : Get(b, 8)) EXPECT_TRUE(std::isnan(v));
}

TEST_F(CudaSimTest, HostPointerArgumentIsRejected) {
  float* dev = Alloc<float>(8);
  std::vector<float> host(8, 1.0f);
  const cudaError_t err = Launch<Copy>(1, 8, 0, nullptr, dev, host.data(), 8);
  ASSERT_EQ(err, cudaErrorInvalidValue);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("kernel Copy: argument 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not device memory"), std::string::npos) << msg;
  // A launch error is not sticky: the next launch works.
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ((Launch<Copy>(1, 8, 0, nullptr, dev, dev, 8)), cudaSuccess);
}

TEST_F(CudaSimTest, CopiesMustStayInsideOneAllocation) {
  float* dev = Alloc<float>(8);
  std::vector<float> host(9, 0.0f);
  EXPECT_EQ(cudaMemcpy(dev, host.data(), 9 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("destination"),
            std::string::npos);
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + 1, 4, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
}

// Block-wide sum through shared memory: thread t writes s[t], a barrier, then
// thread 0 adds them. With `skip_write` thread 5 forgets its element.
__global__ void SharedSum(float* out, bool skip_write) {
  float* s = DynamicShared<float>();
  const int t = static_cast<int>(threadIdx.x);
  if (!(skip_write && t == 5)) s[t] = 1.0f;
  __syncthreads();
  if (t == 0) {
    float sum = 0.0f;
    for (unsigned i = 0; i < blockDim.x; ++i) sum += s[i];
    out[blockIdx.x] = sum;
  }
}

TEST_F(CudaSimTest, ReadOfUnwrittenSharedMemoryIsNaN) {
  float* out = Alloc<float>(3);
  ASSERT_EQ((Launch<SharedSum>(3, 64, 64 * sizeof(float), nullptr, out, false)), cudaSuccess);
  for (float v : Get(out, 3)) EXPECT_EQ(v, 64.0f);
  // Shared memory is poisoned again at every block's start: no block sees
  // the previous block's values.
  ASSERT_EQ((Launch<SharedSum>(3, 64, 64 * sizeof(float), nullptr, out, true)), cudaSuccess);
  for (float v : Get(out, 3)) EXPECT_TRUE(std::isnan(v)) << v;
}

TEST_F(CudaSimTest, SharedMemoryLimitsAreAnH100s) {
  float* out = Alloc<float>(1);
  constexpr size_t kBig = 64 * 1024;
  EXPECT_EQ((Launch<SharedSum>(1, 32, kBig, nullptr, out, false)), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::AllowDynamicShared<SharedSum>(kBig), cudaSuccess);
  EXPECT_EQ((Launch<SharedSum>(1, 32, kBig, nullptr, out, false)), cudaSuccess);
  EXPECT_EQ(kernels::AllowDynamicShared<SharedSum>(228 * 1024), cudaErrorInvalidValue);
  EXPECT_EQ((Launch<SharedSum>(1, 1025, 0, nullptr, out, false)), cudaErrorInvalidConfiguration);
}

// A barrier that thread 7 returns before.
__global__ void SkippedBarrier(float* out) {
  if (threadIdx.x == 7) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST_F(CudaSimTest, BarrierNotReachedByAllThreadsFails) {
  float* out = Alloc<float>(64);
  const cudaError_t err = Launch<SkippedBarrier>(1, 64, 0, nullptr, out);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("kernel SkippedBarrier block (0,0,0)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncthreads is not reached by every thread of the block: thread "
                     "(7,0,0) had exited"),
            std::string::npos)
      << msg;
}

// Warp sum with a full mask, where the upper half of the warp has left: the
// mask names lanes that never arrive.
__global__ void PartialMaskSum(float* out, int active) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane >= active) return;
  float v = 1.0f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[lane] = v;
}

TEST_F(CudaSimTest, ShuffleWithLanesMissingFromTheMaskFails) {
  float* out = Alloc<float>(32);
  ASSERT_EQ((Launch<PartialMaskSum>(1, 32, 0, nullptr, out, 32)), cudaSuccess);
  for (float v : Get(out, 32)) EXPECT_EQ(v, 32.0f);
  const cudaError_t err = Launch<PartialMaskSum>(1, 32, 0, nullptr, out, 16);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("__shfl_xor_sync with mask 0xffffffff: lane 16 of the mask never arrives "
                     "(it had exited)"),
            std::string::npos)
      << msg;
}

// Correct use of a partial mask: the lower 16 lanes reduce among themselves
// with mask 0x0000ffff, the upper 16 wait at the barrier meanwhile.
__global__ void HalfWarpSum(float* out) {
  const int lane = static_cast<int>(threadIdx.x);
  float v = static_cast<float>(lane);
  if (lane < 16) {
    for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0x0000ffffu, v, o);
  }
  __syncthreads();
  out[lane] = v;
}

TEST_F(CudaSimTest, PartialMaskNamingExactlyTheParticipantsWorks) {
  float* out = Alloc<float>(32);
  ASSERT_EQ((Launch<HalfWarpSum>(1, 32, 0, nullptr, out)), cudaSuccess);
  const std::vector<float> h = Get(out, 32);
  for (int l = 0; l < 16; ++l) EXPECT_EQ(h[l], 120.0f);  // 0 + 1 + ... + 15
  for (int l = 16; l < 32; ++l) EXPECT_EQ(h[l], static_cast<float>(l));
}

// A shuffle that reads a lane outside its mask.
__global__ void ReadOutsideMask(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < 16) out[lane] = __shfl_sync(0x0000ffffu, lane, 20);
}

TEST_F(CudaSimTest, ShuffleReadingALaneOutsideTheMaskFails) {
  int* out = Alloc<int>(32);
  const cudaError_t err = Launch<ReadOutsideMask>(1, 32, 0, nullptr, out);
  ASSERT_EQ(err, cudaErrorIllegalInstruction);
  EXPECT_NE(std::string(cudaGetErrorString(err)).find("reads lane 20, which is not in the mask"), std::string::npos)
      << cudaGetErrorString(err);
}

// Every shuffle and vote, against what CUDA's documentation defines, on a
// block of two warps (so lane != thread index for the second).
__global__ void AllCollectives(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  const int lane = t % 32;
  const unsigned full = 0xffffffffu;
  int* o = out + t * 8;
  o[0] = __shfl_sync(full, lane * 10, 3);            // lane 3's value
  o[1] = __shfl_up_sync(full, lane, 2);              // lane - 2, or own below 2
  o[2] = __shfl_down_sync(full, lane, 5);            // lane + 5, or own at the top
  o[3] = __shfl_xor_sync(full, lane, 1);             // neighbour
  o[4] = __shfl_sync(full, lane, 1, 8);              // lane 1 of each 8-lane segment
  o[5] = static_cast<int>(__ballot_sync(full, lane % 3 == 0));
  o[6] = __any_sync(full, lane == 31) + 2 * __all_sync(full, lane < 31);
  __syncwarp();
  o[7] = static_cast<int>(__shfl_sync(full, 1.5 * lane, 31) * 2);  // an 8-byte double
}

TEST_F(CudaSimTest, ShufflesAndVotesFollowCudaSemantics) {
  int* out = Alloc<int>(64 * 8);
  ASSERT_EQ((Launch<AllCollectives>(1, 64, 0, nullptr, out)), cudaSuccess);
  const std::vector<int> h = Get(out, 64 * 8);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
  for (int t = 0; t < 64; ++t) {
    const int l = t % 32;
    const int* o = &h[static_cast<size_t>(t) * 8];
    EXPECT_EQ(o[0], 30) << t;
    EXPECT_EQ(o[1], l >= 2 ? l - 2 : l) << t;
    EXPECT_EQ(o[2], l + 5 < 32 ? l + 5 : l) << t;
    EXPECT_EQ(o[3], l ^ 1) << t;
    EXPECT_EQ(o[4], (l / 8) * 8 + 1) << t;
    EXPECT_EQ(static_cast<unsigned>(o[5]), ballot) << t;
    EXPECT_EQ(o[6], 1) << t;  // any: yes; all: no
    EXPECT_EQ(o[7], 93) << t;
  }
}

// A 2-D block and a 3-D grid: every thread writes its own global index once.
__global__ void Indices(int* out) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * threadIdx.y;
  out[bx * blockDim.x * blockDim.y + tx] = static_cast<int>(bx * 1000 + tx);
}

TEST_F(CudaSimTest, MultiDimensionalGridsAndBlocks) {
  const dim3 grid(2, 3, 2), block(8, 4);
  int* out = Alloc<int>(12 * 32);
  ASSERT_EQ((Launch<Indices>(grid, block, 0, nullptr, out)), cudaSuccess);
  const std::vector<int> h = Get(out, 12 * 32);
  for (int b = 0; b < 12; ++b) {
    for (int t = 0; t < 32; ++t) EXPECT_EQ(h[static_cast<size_t>(b * 32 + t)], b * 1000 + t);
  }
}

__global__ void Traps(int* out) {
  if (threadIdx.x == 3) __trap();
  out[threadIdx.x] = 0;
}

TEST_F(CudaSimTest, TrapFailsTheLaunch) {
  int* out = Alloc<int>(8);
  const cudaError_t err = Launch<Traps>(1, 8, 0, nullptr, out);
  ASSERT_EQ(err, cudaErrorAssert);
  EXPECT_NE(std::string(cudaGetErrorString(err)).find("kernel Traps block (0,0,0) thread (3,0,0)"),
            std::string::npos)
      << cudaGetErrorString(err);
}

// Template arguments appear in the kernel's name.
template <typename T, int kScale>
__global__ void Scale(T* x, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i <= n) x[i] *= kScale;  // a planted off-by-one
}

TEST_F(CudaSimTest, TemplateKernelsAreNamedWithTheirArguments) {
  float* x = Alloc<float>(32);
  const cudaError_t err = Launch<Scale<float, 3>>(1, 64, 0, nullptr, x, 32);
  ASSERT_EQ(err, cudaErrorIllegalAddress);
  EXPECT_NE(std::string(cudaGetErrorString(err)).find("kernel Scale<float, 3> block (0,0,0) "
                                                      "thread (32,0,0): out-of-bounds read"),
            std::string::npos)
      << cudaGetErrorString(err);
}

}  // namespace
}  // namespace ladder
