// The simulator's streams and events (runtime.h), shared by the runtime
// (runtime.cc) and stream capture (graph.cc). Work runs when it is enqueued,
// so a stream holds no queue: only, while it captures, the work recorded
// for a graph. Internal to the simulator.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "src/backend/cuda_sim/runtime.h"

namespace ladder {
namespace cuda_sim {

struct SimStream {
  uint32_t magic = kMagic;
  // Between cudaStreamBeginCapture and cudaStreamEndCapture: the work
  // recorded so far, and why the capture was invalidated (empty while it
  // is valid).
  bool capturing = false;
  std::vector<internal::StreamWork> captured;
  std::string invalidated;
  static constexpr uint32_t kMagic = 0x5354524d;  // "STRM"
};

struct SimEvent {
  uint32_t magic = kMagic;
  bool recorded = false;
  bool captured = false;  // last recorded inside a capture: not readable
  std::chrono::steady_clock::time_point when;
  static constexpr uint32_t kMagic = 0x45564e54;  // "EVNT"
};

namespace internal {

// null is the legacy default stream.
inline bool ValidStream(cudaStream_t s) { return s == nullptr || s->magic == SimStream::kMagic; }
inline bool ValidEvent(cudaEvent_t e) { return e != nullptr && e->magic == SimEvent::kMagic; }

// cudaSuccess while no capture is active. Otherwise `call` is one CUDA
// forbids during a global-mode capture: every active capture is
// invalidated (naming the call) and cudaErrorStreamCaptureUnsupported is
// returned, with a message naming the call.
cudaError_t RefuseDuringCapture(const char* call);
// Ends every capture, dropping what it recorded (cudaDeviceReset).
void EndAllCaptures();

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
