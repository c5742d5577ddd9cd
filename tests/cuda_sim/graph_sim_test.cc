// Stream capture and CUDA graphs in the simulator (runtime.h's contract,
// graph.cc): a capture records and runs nothing, a graph replays its work in
// order with the arguments it was captured with, and every call CUDA forbids
// during a global-mode capture fails here too and invalidates the capture,
// so code that captures cleanly under the simulator captures on a GPU.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/launch.cuh"
#include "tests/cuda_sim/sim_test.h"

namespace ladder {
namespace {

using kernels::Launch;

class GraphSimTest : public SimDeviceTest {
 protected:
  void SetUp() override {
    SimDeviceTest::SetUp();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamDestroy(stream_);
    SimDeviceTest::TearDown();
  }
  cudaStream_t stream_ = nullptr;
};

// x[i] = x[i] * a + b: two different launches do not commute, so a replay
// in the wrong order (or with the wrong arguments) gives different numbers.
__global__ void AffineInPlace(float* x, int n, float a, float b) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = x[i] * a + b;
}

TEST_F(GraphSimTest, CaptureRecordsAndReplaysInOrder) {
  const int n = 40;
  float* x = Alloc<float>(n);
  Put(x, std::vector<float>(n, 1.0f));

  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ((Launch<AffineInPlace>(2, 32, 0, stream_, x, n, 2.0f, 0.0f)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(x + 1, 0, sizeof(float), stream_), cudaSuccess);
  ASSERT_EQ((Launch<AffineInPlace>(2, 32, 0, stream_, x, n, 1.0f, 3.0f)), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);

  // Nothing ran during the capture.
  EXPECT_EQ(Get(x, n), std::vector<float>(n, 1.0f));

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the exec keeps its own copy
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  std::vector<float> once = Get(x, n);
  EXPECT_EQ(once[0], 5.0f);  // 1 * 2 + 3
  EXPECT_EQ(once[1], 3.0f);  // zeroed between the launches, then + 3
  // A second replay runs the same work on what the memory holds now.
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  std::vector<float> twice = Get(x, n);
  EXPECT_EQ(twice[0], 13.0f);  // 5 * 2 + 3
  EXPECT_EQ(twice[1], 3.0f);
  EXPECT_EQ(twice[n - 1], 13.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

// Each forbidden call: it fails with cudaErrorStreamCaptureUnsupported, and
// the capture's end says which call invalidated it.
TEST_F(GraphSimTest, ForbiddenCallsInvalidateTheCaptureNamingTheCall) {
  float* x = Alloc<float>(8);
  float host[8] = {};
  struct Case {
    const char* name;
    cudaError_t (*call)(float* x, float* host, cudaStream_t s);
  };
  const Case cases[] = {
      {"cudaMalloc",
       [](float*, float*, cudaStream_t) {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       }},
      {"cudaFree", [](float* x, float*, cudaStream_t) { return cudaFree(x); }},
      {"cudaMemcpy",
       [](float* x, float* host, cudaStream_t) {
         return cudaMemcpy(host, x, 8 * sizeof(float), cudaMemcpyDeviceToHost);
       }},
      {"cudaMemset", [](float* x, float*, cudaStream_t) { return cudaMemset(x, 0, 4); }},
      {"cudaMemcpyAsync between host and device",
       [](float* x, float* host, cudaStream_t s) {
         return cudaMemcpyAsync(x, host, 8 * sizeof(float), cudaMemcpyHostToDevice, s);
       }},
      {"cudaStreamSynchronize",
       [](float*, float*, cudaStream_t s) { return cudaStreamSynchronize(s); }},
      {"cudaDeviceSynchronize",
       [](float*, float*, cudaStream_t) { return cudaDeviceSynchronize(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ((Launch<AffineInPlace>(1, 32, 0, stream_, x, 8, 1.0f, 1.0f)), cudaSuccess);
    const cudaError_t err = c.call(x, host, stream_);
    EXPECT_EQ(err, cudaErrorStreamCaptureUnsupported);
    EXPECT_NE(std::string(cudaGetErrorString(err)).find(c.name), std::string::npos)
        << cudaGetErrorString(err);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    EXPECT_EQ(end, cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    const std::string msg = cudaGetErrorString(end);
    EXPECT_NE(msg.find(std::string("invalidated by ") + c.name), std::string::npos) << msg;
  }
  // Outside a capture the same calls work again, and the memory was never
  // freed nor written by the dropped captures.
  EXPECT_EQ(cudaMemset(x, 0, 8 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(Get(x, 8), std::vector<float>(8, 0.0f));
}

TEST_F(GraphSimTest, LegacyStreamWorkDuringACaptureIsRefused) {
  float* x = Alloc<float>(8);
  Put(x, std::vector<float>(8, 1.0f));
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  const cudaError_t err = Launch<AffineInPlace>(1, 32, 0, nullptr, x, 8, 2.0f, 0.0f);
  EXPECT_EQ(err, cudaErrorStreamCaptureImplicit);
  EXPECT_NE(std::string(cudaGetErrorString(err)).find("legacy default stream"), std::string::npos)
      << cudaGetErrorString(err);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(Get(x, 8), std::vector<float>(8, 1.0f));  // the refused launch never ran
  // The legacy stream cannot capture at all.
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
}

TEST_F(GraphSimTest, EventRecordedInACaptureCannotBeRead) {
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(event), cudaErrorCapturedEvent);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, event, event), cudaErrorCapturedEvent);
  // Recorded again outside a capture, it is an ordinary event.
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// A graph holds raw pointers: replayed after its memory was freed, it faults
// as a GPU would, and the message names the argument.
TEST_F(GraphSimTest, ReplayAfterTheMemoryWasFreedFails) {
  float* x = Alloc<float>(8);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ((Launch<AffineInPlace>(1, 32, 0, stream_, x, 8, 1.0f, 1.0f)), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaFree(x), cudaSuccess);
  const cudaError_t err = cudaGraphLaunch(exec, stream_);
  EXPECT_NE(err, cudaSuccess);
  const std::string msg = cudaGetErrorString(err);
  EXPECT_NE(msg.find("AffineInPlace"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 0 ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not device memory"), std::string::npos) << msg;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace ladder
