// CUDA events as the trace's device clock (event_timer.h).
#include "src/backend/cuda/event_timer.h"

#include "absl/strings/str_cat.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN

EventTimer::~EventTimer() { DestroyEvents(); }

void EventTimer::DestroyEvents() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  events_.clear();
}

absl::Status EventTimer::Anchor() {
  DestroyEvents();
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "trace anchor"));
  if (Mark() != 0) return absl::InternalError("trace anchor: cannot record a CUDA event");
  return absl::OkStatus();
}

int EventTimer::Mark() {
  // An event recorded while the stream captures a graph belongs to the
  // graph and cannot be read: no mark (the span gets host time only).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    return -1;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) return -1;
  if (cudaEventRecord(e, stream_) != cudaSuccess) {
    cudaEventDestroy(e);
    return -1;
  }
  events_.push_back(e);
  return static_cast<int>(events_.size()) - 1;
}

absl::StatusOr<int64_t> EventTimer::SinceAnchor(int id) {
  if (events_.empty() || id < 0 || id >= static_cast<int>(events_.size())) {
    return absl::OutOfRangeError(absl::StrCat("no trace mark ", id));
  }
  RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[id]), "trace mark"));
  float ms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, events_[0], events_[id]), "trace mark"));
  return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
}

LADDER_CUDA_END
