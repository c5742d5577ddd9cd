// Backend::Capture and DeviceGraph (backend.h "graphs") on every backend:
// recording runs nothing, a replay runs the recorded ops on what their
// tensors hold at that time, a capture that would wait for the device or
// allocate fails naming why and leaves the backend usable, and a graph
// whose scratch moved refuses to replay. The CPU backend has no graphs.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/backend/backend_test_util.h"

namespace ladder::testing_backends {
namespace {

class GraphTest : public BackendTest {
 protected:
  bool SkipWithoutGraphs() {
    if (be().supports_graphs()) return false;
    const absl::StatusOr<std::unique_ptr<DeviceGraph>> g =
        be().Capture([] { return absl::OkStatus(); });
    EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented) << g.status();
    return true;
  }
};

TEST_P(GraphTest, RecordsThenReplaysOnCurrentContents) {
  if (SkipWithoutGraphs()) return;
  const int n = 300;
  DeviceArray<float> a = Out({n});
  DeviceArray<float> b = Out({n});
  std::vector<float> c_host(n);
  for (int i = 0; i < n; ++i) c_host[i] = 0.5f * static_cast<float>(i);
  DeviceArray<float> c = Up(c_host, {n});

  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph = be().Capture([&]() -> absl::Status {
    RETURN_IF_ERROR(be().Fill(a.t(), 2.0f));
    return be().ResidualAdd(b.t(), a.t(), c.t());
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE((*graph)->valid());
  // Recording ran nothing: both outputs still hold their poison.
  for (float x : b.Get()) ASSERT_TRUE(std::isnan(x));
  for (float x : a.Get()) ASSERT_TRUE(std::isnan(x));

  ASSERT_TRUE((*graph)->Replay().ok());
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2.0f + c_host[i];
  EXPECT_TRUE(BitwiseEqual(b.Get(), want));
  // A replay reads the tensors as they are now.
  for (int i = 0; i < n; ++i) c_host[i] = -1.0f * static_cast<float>(i);
  c.Set(c_host);
  b.Poison();
  ASSERT_TRUE((*graph)->Replay().ok());
  for (int i = 0; i < n; ++i) want[i] = 2.0f + c_host[i];
  EXPECT_TRUE(BitwiseEqual(b.Get(), want));
}

TEST_P(GraphTest, HostCopyInsideACaptureFailsAndTheBackendGoesOn) {
  if (SkipWithoutGraphs()) return;
  DeviceArray<float> a = Out({16});
  std::vector<float> host(16);
  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph = be().Capture([&]() -> absl::Status {
    RETURN_IF_ERROR(be().Fill(a.t(), 1.0f));
    return be().CopyToHost(host.data(), a.t());
  });
  ASSERT_FALSE(graph.ok());
  if (std::string(GetParam()) == "cuda-sim") {
    EXPECT_NE(
        graph.status().message().find("invalidated by cudaMemcpyAsync between host and device"),
        std::string::npos)
        << graph.status();
  }
  // Nothing of the failed capture ran, and the backend works as before.
  for (float x : a.Get()) ASSERT_TRUE(std::isnan(x));
  ASSERT_TRUE(be().Fill(a.t(), 3.0f).ok());
  EXPECT_TRUE(BitwiseEqual(a.Get(), std::vector<float>(16, 3.0f)));
}

// SumOfSquares needs scratch that grows with its input: more than the
// backend holds cannot be allocated inside a capture, and once the scratch
// grows, a graph recorded before points at freed memory and refuses.
TEST_P(GraphTest, ScratchMustBeSizedBeforeAndNotMovedAfter) {
  if (SkipWithoutGraphs()) return;
  const int small = 1000, large = 1 << 17;
  DeviceArray<float> x = Up(std::vector<float>(large, 0.5f), {large});
  DeviceArray<float> out = Out({1});
  ASSERT_TRUE(be().SumOfSquares(x.t({small}), out.t()).ok());  // sizes the scratch
  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph =
      be().Capture([&] { return be().SumOfSquares(x.t({small}), out.t()); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  out.Poison();
  ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(out.Get()[0], 0.25f * small);

  absl::StatusOr<std::unique_ptr<DeviceGraph>> larger =
      be().Capture([&] { return be().SumOfSquares(x.t(), out.t()); });
  ASSERT_FALSE(larger.ok());
  EXPECT_EQ(larger.status().code(), absl::StatusCode::kFailedPrecondition) << larger.status();
  EXPECT_NE(larger.status().message().find("run the ops once before capturing"), std::string::npos)
      << larger.status();

  ASSERT_TRUE(be().SumOfSquares(x.t(), out.t()).ok());  // grows the scratch
  EXPECT_EQ(out.Get()[0], 0.25f * large);
  EXPECT_FALSE((*graph)->valid());
  EXPECT_EQ((*graph)->Replay().code(), absl::StatusCode::kFailedPrecondition);
}

LADDER_INSTANTIATE_ON_ALL_BACKENDS(GraphTest);

}  // namespace
}  // namespace ladder::testing_backends
