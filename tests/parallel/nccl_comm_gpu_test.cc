// The NCCL communicator on one GPU (CUDA builds; skips without a device).
// One process can only form groups of one (NCCL refuses two ranks on one
// GPU), so this checks the machinery: the unique id over the host group,
// non-blocking initialization, stream-ordered calls polled to completion, the
// argument checks, and teardown. Multi-rank results are checked by the
// parallel training tests on a multi-GPU machine.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/backend_factory.h"
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

// The carrier a training run gets for the CUDA backend's tensors: NCCL on the
// backend's own stream, so a collective sees the ops enqueued before it
// without a host wait in between (Fill, AllReduce, CopyToHost: nothing else
// synchronizes).
TEST(NcclCommunicatorTest, TheBackendsCarrierRunsInItsStreamOrder) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << why;
  auto backend = MakeBackend("cuda");
  ASSERT_TRUE(backend.ok()) << backend.status();
  SelfCommunicator host(Axis::kTensor, 0);
  auto made = MakeDeviceCommunicator(**backend, host, 60);
  ASSERT_TRUE(made.ok()) << made.status();
  const int64_t n = 1 << 20;
  auto buf = (*backend)->Allocate(n * sizeof(float));
  ASSERT_TRUE(buf.ok()) << buf.status();
  Tensor x = Tensor::F32(static_cast<float*>(buf->get()), {n}, Device::kCuda);
  ASSERT_TRUE((*backend)->Fill(x, 2.5f).ok());
  ASSERT_TRUE((*made)->AllReduce(x, ReduceOp::kMax).ok());
  ASSERT_TRUE((*made)->Broadcast(x, 0).ok());
  std::vector<float> out(n, 0.0f);
  ASSERT_TRUE((*backend)->CopyToHost(out.data(), x).ok());
  EXPECT_EQ(out, std::vector<float>(n, 2.5f));
}

}  // namespace
}  // namespace ladder
