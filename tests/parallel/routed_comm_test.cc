// RoutedCommunicator: every call reaches the carrier of its buffers' device,
// mixed devices are refused before either carrier sees the call, and stats()
// adds up what both carriers recorded. The carriers are fakes that log each
// call, so the routing is checked without MPI or a GPU; the MPI runs of the
// CUDA backend on the simulator (cuda_sim_model_test.sh) route through it for
// real.
#include "src/parallel/routed_comm.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

// Logs "<op>" for each call and records it as a group of two would (1 s and
// the buffer's bytes), so the routed stats can be checked.
class FakeCarrier final : public Communicator {
 public:
  explicit FakeCarrier(std::vector<std::string>* log) : Communicator(Axis::kData, {0, 1}, 0), log_(log) {}

  absl::Status AllReduce(Tensor buf, ReduceOp) override { return Log("AllReduce", buf.bytes()); }
  absl::Status ReduceScatter(Tensor in, Tensor) override { return Log("ReduceScatter", in.bytes()); }
  absl::Status AllGather(Tensor, Tensor out) override { return Log("AllGather", out.bytes()); }
  absl::Status Broadcast(Tensor buf, int) override { return Log("Broadcast", buf.bytes()); }
  absl::Status Send(Tensor buf, int) override { return Log("Send", buf.bytes()); }
  absl::Status Recv(Tensor buf, int) override { return Log("Recv", buf.bytes()); }
  absl::Status SendRecv(Tensor send, int, Tensor recv, int) override {
    return Log("SendRecv", send.bytes() + recv.bytes());
  }
  absl::Status Barrier() override { return Log("Barrier", 0); }

 private:
  absl::Status Log(const char* op, int64_t bytes) {
    log_->push_back(op);
    RecordStats(1.0, bytes);
    return absl::OkStatus();
  }
  std::vector<std::string>* log_;
};

class RoutedCommunicatorTest : public ::testing::Test {
 protected:
  RoutedCommunicatorTest()
      : routed_(std::make_unique<FakeCarrier>(&host_log_),
                std::make_unique<FakeCarrier>(&device_log_)) {}

  // Views only: the fakes never touch the bytes.
  Tensor On(Device d, int64_t n) { return Tensor::F32(storage_, {n}, d); }

  float storage_[8] = {};
  std::vector<std::string> host_log_, device_log_;
  RoutedCommunicator routed_;
};

TEST_F(RoutedCommunicatorTest, EachCallGoesToItsBuffersDevice) {
  ASSERT_TRUE(routed_.AllReduce(On(Device::kCuda, 4), ReduceOp::kSum).ok());
  ASSERT_TRUE(routed_.AllReduce(On(Device::kCpu, 1), ReduceOp::kMax).ok());
  ASSERT_TRUE(routed_.ReduceScatter(On(Device::kCuda, 4), On(Device::kCuda, 2)).ok());
  ASSERT_TRUE(routed_.AllGather(On(Device::kCpu, 2), On(Device::kCpu, 4)).ok());
  ASSERT_TRUE(routed_.Broadcast(On(Device::kCuda, 8), 0).ok());
  ASSERT_TRUE(routed_.Send(On(Device::kCuda, 3), 1).ok());
  ASSERT_TRUE(routed_.Recv(On(Device::kCpu, 3), 1).ok());
  ASSERT_TRUE(routed_.SendRecv(On(Device::kCuda, 2), 1, On(Device::kCuda, 2), 1).ok());
  ASSERT_TRUE(routed_.Barrier().ok());

  EXPECT_EQ(device_log_, (std::vector<std::string>{"AllReduce", "ReduceScatter", "Broadcast",
                                                   "Send", "SendRecv"}));
  EXPECT_EQ(host_log_, (std::vector<std::string>{"AllReduce", "AllGather", "Recv", "Barrier"}));

  // Both carriers' records, once each: 9 calls of 1 s; bytes as comm.h
  // defines them (16 + 4 + 16 + 16 + 32 + 12 + 12 + 16 + 0).
  EXPECT_EQ(routed_.stats().calls, 9);
  EXPECT_DOUBLE_EQ(routed_.stats().seconds, 9.0);
  EXPECT_EQ(routed_.stats().bytes, 124);
}

TEST_F(RoutedCommunicatorTest, MixedDevicesAreRefusedBeforeAnyCarrierIsCalled) {
  absl::Status s = routed_.ReduceScatter(On(Device::kCuda, 4), On(Device::kCpu, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "ReduceScatter: in is a CUDA tensor but out a CPU one");
  EXPECT_EQ(routed_.AllGather(On(Device::kCpu, 2), On(Device::kCuda, 4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(routed_.SendRecv(On(Device::kCpu, 2), 1, On(Device::kCuda, 2), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(host_log_.empty());
  EXPECT_TRUE(device_log_.empty());
  EXPECT_EQ(routed_.stats().calls, 0);
}

TEST_F(RoutedCommunicatorTest, TakesTheCarriersGroup) {
  EXPECT_EQ(routed_.axis(), Axis::kData);
  EXPECT_EQ(routed_.size(), 2);
  EXPECT_EQ(routed_.rank(), 0);
  EXPECT_EQ(routed_.members(), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace ladder
