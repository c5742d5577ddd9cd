// The CUDA backend's DeviceTimer (src/core/trace.h): CUDA events recorded
// on the backend's stream, so a traced span's device time is the time the
// stream took between the two events (cudaEventElapsedTime), not the time
// the host took to queue the work. Events are created as marks are made and
// destroyed by the next Anchor (or the timer's end). One host thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/namespace.h"
#include "src/core/trace.h"

LADDER_CUDA_BEGIN

class EventTimer final : public DeviceTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventTimer() override;
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  absl::Status Anchor() override;
  int Mark() override;
  absl::StatusOr<int64_t> SinceAnchor(int id) override;

 private:
  void DestroyEvents();

  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // events_[0]: the anchor
};

LADDER_CUDA_END
