// The traced window of steps and the merged trace file (step_trace.h).
#include "src/train/step_trace.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/parallel/clock_sync.h"

namespace ladder {
namespace {

// One int64 as a host message.
Tensor Word(int64_t* v) { return Tensor(v, DType::kI8, {8}, Device::kCpu); }

}  // namespace

absl::StatusOr<StepWindow> ParseStepWindow(const std::string& spec) {
  StepWindow w;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(spec.substr(0, colon), &w.first) ||
      !absl::SimpleAtoi(spec.substr(colon + 1), &w.last) || w.first < 1 || w.last < w.first) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace-steps '", spec,
                     "': expected A:B, the first and last step to trace (1 <= A <= B)"));
  }
  return w;
}

absl::StatusOr<StepWindow> FitStepWindow(StepWindow w, bool explicit_window, int64_t begin,
                                         int64_t end) {
  StepWindow fit;
  if (explicit_window) {
    fit.first = std::max(w.first, begin);
    fit.last = std::min(w.last, end);
    if (fit.first > fit.last) {
      return absl::InvalidArgumentError(absl::StrCat("--trace-steps ", w.first, ":", w.last,
                                                     " has no step in this run (steps ", begin,
                                                     " to ", end, ")"));
    }
    return fit;
  }
  fit.first = std::min(std::max(w.first, begin), end);
  fit.last = std::min(std::max(w.last, fit.first), end);
  return fit;
}

StepTrace::StepTrace(std::string path, StepWindow window, const Grid& grid, DeviceTimer* device)
    : path_(std::move(path)),
      window_(window),
      process_name_(absl::StrFormat("rank %d (dp %d, tp %d, pp %d)", grid.rank(), grid.dp_rank(),
                                    grid.tp_rank(), grid.pp_rank())),
      rank_(grid.rank()),
      device_(device) {}

absl::StatusOr<bool> StepTrace::AtStep(int64_t steps_done, Communicator& world) {
  if (finished_) return false;
  if (started_ && steps_done >= window_.last) return Finish(world);
  if (!started_ && steps_done + 1 == window_.first) {
    started_ = true;
    recorder_.Clear();
    if (device_ != nullptr) RETURN_IF_ERROR(device_->Anchor());
    zero_ns_ = NowNanos();
    recorder_.SetDeviceTimer(device_, zero_ns_);
    recorder_.Activate();
  }
  return false;
}

absl::StatusOr<bool> StepTrace::Finish(Communicator& world) {
  TraceRecorder::Deactivate();
  finished_ = true;
  RETURN_IF_ERROR(recorder_.ResolveDeviceSpans());
  ASSIGN_OR_RETURN(const ClockOffset offset, EstimateClockOffset(world, NowNanos));
  // Time zero: rank 0's start of recording, on rank 0's clock.
  int64_t zero = zero_ns_;
  if (world.size() > 1) RETURN_IF_ERROR(world.Broadcast(Word(&zero), 0));
  std::string mine = recorder_.ToJson(rank_, process_name_, zero + offset.offset_ns);
  recorder_.Clear();
  if (world.rank() != 0) {
    int64_t header[2] = {static_cast<int64_t>(mine.size()), offset.error_ns};
    RETURN_IF_ERROR(world.Send(Tensor(header, DType::kI8, {16}, Device::kCpu), 0));
    RETURN_IF_ERROR(world.Send(Tensor(mine.data(), DType::kI8, {header[0]}, Device::kCpu), 0));
    return false;
  }
  std::string json = absl::StrCat("{\"traceEvents\":[\n", mine);
  std::string errors = "0";
  for (int r = 1; r < world.size(); ++r) {
    int64_t header[2] = {0, 0};
    RETURN_IF_ERROR(world.Recv(Tensor(header, DType::kI8, {16}, Device::kCpu), r));
    std::string theirs(static_cast<size_t>(header[0]), '\0');
    RETURN_IF_ERROR(world.Recv(Tensor(theirs.data(), DType::kI8, {header[0]}, Device::kCpu), r));
    absl::StrAppend(&json, ",\n", theirs);
    absl::StrAppendFormat(&errors, ",%.3f", static_cast<double>(header[1]) / 1000.0);
  }
  absl::StrAppend(&json, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"steps\":\"",
                  window_.first, ":", window_.last, "\",\"clock_error_us\":[", errors, "]}}\n");
  RETURN_IF_ERROR(WriteFileAtomically(path_, json));
  return true;
}

}  // namespace ladder
