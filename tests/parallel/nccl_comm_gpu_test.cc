// The NCCL communicator on one GPU (CUDA builds; skips without a device).
// One process can only form groups of one (NCCL refuses two ranks on one
// GPU), so this checks the machinery: the unique id over the host group,
// non-blocking initialization, stream-ordered calls polled to completion, the
// argument checks, and teardown. Multi-rank results are checked by the
// parallel training tests on a multi-GPU machine.
#include <cuda_runtime.h>

#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cuda/cuda_device.h"
#include "src/parallel/nccl_comm.h"
#include "src/parallel/self_comm.h"

namespace ladder {
namespace {

TEST(NcclCommunicatorTest, GroupOfOneRunsEveryCall) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << why;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  SelfCommunicator host(Axis::kData, 0);
  auto made = CreateNcclCommunicator(host, stream, 60);
  ASSERT_TRUE(made.ok()) << made.status();
  Communicator& c = **made;
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.axis(), Axis::kData);

  const int64_t n = 1000;
  std::vector<float> host_in(n), host_out(n);
  for (int64_t i = 0; i < n; ++i) host_in[i] = 0.5f * static_cast<float>(i);
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host_in.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  Tensor ta(a, DType::kF32, {n}, Device::kCuda), tb(b, DType::kF32, {n}, Device::kCuda);

  ASSERT_TRUE(c.AllReduce(ta, ReduceOp::kSum).ok());
  ASSERT_TRUE(c.AllReduce(ta, ReduceOp::kMax).ok());
  ASSERT_TRUE(c.ReduceScatter(ta, tb).ok());
  ASSERT_TRUE(c.AllGather(tb, ta).ok());
  ASSERT_TRUE(c.AllGather(ta, ta).ok());  // in place
  ASSERT_TRUE(c.Broadcast(ta, 0).ok());
  ASSERT_TRUE(c.Barrier().ok());
  ASSERT_EQ(cudaMemcpy(host_out.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host_out, host_in);
  EXPECT_EQ(c.stats().calls, 0);  // a group of one records nothing

  std::vector<float> cpu(n);
  EXPECT_EQ(c.AllReduce(Tensor::F32(cpu.data(), {n}, Device::kCpu), ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Send(ta, 0).code(), absl::StatusCode::kInvalidArgument);

  made->reset();
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace ladder
