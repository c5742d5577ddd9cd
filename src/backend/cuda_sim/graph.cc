// Stream capture and CUDA graphs in the simulator (runtime.h's contract).
//
// A capture turns a stream into a recorder: everything enqueued on it
// (internal::Enqueue: launches, async copies and memsets, event records,
// cuBLASLt matmuls) is kept as a closure holding its arguments by value,
// instead of running. cudaStreamEndCapture hands the closures over as a
// graph; an instantiated graph runs them, in order, on each launch, on the
// stream it is launched on (recorded again if that stream is capturing).
// That is a GPU graph's meaning for one stream: the same kernels with the
// same arguments, pointers included, so what a replay reads and writes is
// whatever those pointers hold at the time.
//
// Calls CUDA forbids during a global-mode capture (they would wait for the
// device, or allocate) fail here as they do there and invalidate the
// capture, so code that works under the simulator's capture does not break
// on a GPU's.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cuda_sim/errors.h"
#include "src/backend/cuda_sim/stream.h"

namespace ladder {
namespace cuda_sim {

struct SimGraph {
  std::vector<internal::StreamWork> work;
};
struct SimGraphExec {
  std::vector<internal::StreamWork> work;
};

namespace internal {
namespace {

std::mutex capture_mu;
std::vector<SimStream*>* capturing_streams = new std::vector<SimStream*>;  // under capture_mu
std::atomic<int> active_captures{0};

}  // namespace

bool CaptureActive() { return active_captures.load(std::memory_order_relaxed) > 0; }

cudaError_t Enqueue(cudaStream_t stream, StreamWork work) {
  if (stream != nullptr && stream->capturing) {
    if (stream->invalidated.empty()) stream->captured.push_back(std::move(work));
    return cudaSuccess;
  }
  if (stream == nullptr && CaptureActive()) {
    const cudaError_t err = RefuseDuringCapture("work on the legacy default stream");
    return Fail(cudaErrorStreamCaptureImplicit, cudaGetErrorString(err));
  }
  return work(stream);
}

cudaError_t RefuseDuringCapture(const char* call) {
  if (!CaptureActive()) return cudaSuccess;
  std::lock_guard<std::mutex> lock(capture_mu);
  for (SimStream* s : *capturing_streams) {
    if (s->invalidated.empty()) s->invalidated = call;
    s->captured.clear();
  }
  return Fail(cudaErrorStreamCaptureUnsupported,
              absl::StrCat(call, ": not permitted while a stream is capturing (global mode)"));
}

void EndAllCaptures() {
  std::lock_guard<std::mutex> lock(capture_mu);
  for (SimStream* s : *capturing_streams) {
    s->capturing = false;
    s->captured.clear();
    s->invalidated.clear();
  }
  capturing_streams->clear();
  active_captures.store(0);
}

}  // namespace internal

using internal::Fail;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (internal::StickyError() != cudaSuccess) return internal::StickyError();
  if (stream == nullptr || !internal::ValidStream(stream)) {
    return Fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy default stream cannot capture; create a "
                "stream");
  }
  if (mode != cudaStreamCaptureModeGlobal) {
    return Fail(cudaErrorInvalidValue,
                "cudaStreamBeginCapture: the simulator captures in global mode only");
  }
  if (stream->capturing) {
    return Fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is capturing already");
  }
  std::lock_guard<std::mutex> lock(internal::capture_mu);
  stream->capturing = true;
  stream->captured.clear();
  stream->invalidated.clear();
  internal::capturing_streams->push_back(stream);
  internal::active_captures.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return Fail(cudaErrorInvalidValue, "cudaStreamEndCapture: null graph");
  *graph = nullptr;
  if (stream == nullptr || !internal::ValidStream(stream) || !stream->capturing) {
    return Fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  }
  std::vector<internal::StreamWork> work = std::move(stream->captured);
  std::string invalidated = std::move(stream->invalidated);
  {
    std::lock_guard<std::mutex> lock(internal::capture_mu);
    stream->capturing = false;
    stream->captured.clear();
    stream->invalidated.clear();
    auto& v = *internal::capturing_streams;
    v.erase(std::remove(v.begin(), v.end(), stream), v.end());
    internal::active_captures.fetch_sub(1);
  }
  if (!invalidated.empty()) {
    return Fail(cudaErrorStreamCaptureInvalidated,
                absl::StrCat("cudaStreamEndCapture: the capture was invalidated by ", invalidated,
                             ", which is not permitted during a capture"));
  }
  *graph = new SimGraph{std::move(work)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!internal::ValidStream(stream) || status == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamIsCapturing: bad stream");
  }
  if (stream == nullptr || !stream->capturing) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status = stream->invalidated.empty() ? cudaStreamCaptureStatusActive
                                          : cudaStreamCaptureStatusInvalidated;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long /*flags*/) {
  if (internal::StickyError() != cudaSuccess) return internal::StickyError();
  if (exec == nullptr || graph == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph or result");
  }
  *exec = new SimGraphExec{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (internal::StickyError() != cudaSuccess) return internal::StickyError();
  if (exec == nullptr || !internal::ValidStream(stream)) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: bad graph or stream");
  }
  for (const internal::StreamWork& w : exec->work) {
    const cudaError_t err = internal::Enqueue(stream, w);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

}  // namespace cuda_sim
}  // namespace ladder
