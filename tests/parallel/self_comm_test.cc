// The group of one, and the communicators of a run started without mpirun:
// both need no MPI at all.
#include "src/parallel/self_comm.h"

#include <vector>

#include "gtest/gtest.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {
namespace {

TEST(SelfCommunicatorTest, CollectivesAreIdentityCopies) {
  SelfCommunicator c(Axis::kData, 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  std::vector<float> a = {1, 2, 3, 4};
  ASSERT_TRUE(c.AllReduce(Tensor::F32(a.data(), {4}, Device::kCpu), ReduceOp::kSum).ok());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
  std::vector<float> b(4);
  ASSERT_TRUE(c.ReduceScatter(Tensor::F32(a.data(), {4}, Device::kCpu),
                              Tensor::F32(b.data(), {4}, Device::kCpu))
                  .ok());
  EXPECT_EQ(b, a);
  std::vector<float> g(4);
  ASSERT_TRUE(c.AllGather(Tensor::F32(a.data(), {2, 2}, Device::kCpu),
                          Tensor::F32(g.data(), {4}, Device::kCpu))
                  .ok());
  EXPECT_EQ(g, a);
  ASSERT_TRUE(c.AllGather(Tensor::F32(g.data(), {4}, Device::kCpu),
                          Tensor::F32(g.data(), {4}, Device::kCpu))
                  .ok());
  ASSERT_TRUE(c.Broadcast(Tensor::F32(a.data(), {4}, Device::kCpu), 0).ok());
  ASSERT_TRUE(c.Barrier().ok());
  // A group of one communicates nothing, so it records nothing.
  EXPECT_EQ(c.stats().calls, 0);
  EXPECT_EQ(c.stats().bytes, 0);
}

TEST(SelfCommunicatorTest, RefusesWhatAGroupOfTwoWouldRefuse) {
  SelfCommunicator c(Axis::kPipeline, 3);
  std::vector<float> a(4), b(2);
  std::vector<uint16_t> h(4);
  auto code = [](absl::Status s) { return s.code(); };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(c.Send(Tensor::F32(a.data(), {4}, Device::kCpu), 0)), kBad);  // no peer
  EXPECT_EQ(code(c.Recv(Tensor::F32(a.data(), {4}, Device::kCpu), 1)), kBad);
  EXPECT_EQ(code(c.Broadcast(Tensor::F32(a.data(), {4}, Device::kCpu), 1)), kBad);
  EXPECT_EQ(code(c.ReduceScatter(Tensor::F32(a.data(), {4}, Device::kCpu),
                                 Tensor::F32(b.data(), {2}, Device::kCpu))),
            kBad);
  EXPECT_EQ(code(c.AllReduce(Tensor(h.data(), DType::kI8, {4}, Device::kCpu), ReduceOp::kSum)),
            kBad);  // i8 is moved, never reduced
  EXPECT_EQ(code(c.AllReduce(Tensor(), ReduceOp::kSum)), kBad);
  absl::Status s = c.Send(Tensor::F32(a.data(), {4}, Device::kCpu), 0);
  EXPECT_EQ(s.message(),
            "Send: peer 0 is not another rank of the pipeline group (size 1, this rank 0)");
  EXPECT_EQ(c.members(), std::vector<int>{3});
}

TEST(HostCommunicatorsTest, ASingleProcessGetsGroupsOfOneWithoutMpi) {
  ASSERT_FALSE(MpiRuntime::active());
  EXPECT_EQ(MpiRuntime::world_size(), 1);
  auto grid = Grid::Create({}, 1, 0);
  ASSERT_TRUE(grid.ok());
  auto comms = CreateHostCommunicators(*grid, 300);
  ASSERT_TRUE(comms.ok()) << comms.status();
  for (Axis axis : kAllAxes) {
    EXPECT_EQ((*comms)[axis].axis(), axis);
    EXPECT_EQ((*comms)[axis].size(), 1);
  }
  // A grid for more ranks than this process has is refused, not half-built.
  auto big = Grid::Create({.dp = 2}, 2, 0);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(CreateHostCommunicators(*big, 300).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladder
