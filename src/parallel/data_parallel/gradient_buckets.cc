#include "src/parallel/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <utility>

#include "src/core/status.h"
#include "src/core/timer.h"

namespace ladder::dp {

GradientBuckets::GradientBuckets(Communicator* group, Tensor grads, int64_t bucket_floats,
                                 bool overlap)
    : group_(group), grads_(grads), overlap_(overlap) {
  const int64_t bucket = std::max<int64_t>(1, bucket_floats);
  for (int64_t end = grads.numel(); end > 0; end -= bucket) {
    ranges_.push_back({std::max<int64_t>(0, end - bucket), end});
  }
}

// Pending operations wait for themselves when destroyed (comm.h), so an
// error mid-step leaves no reduction writing into a freed buffer.
GradientBuckets::~GradientBuckets() = default;

void GradientBuckets::BeginStep() {
  in_flight_.clear();
  next_ = 0;
  busy_until_ns_ = 0;
  overlapped_ = exposed_ = 0;
}

absl::Status GradientBuckets::StartNext() {
  const Range r = ranges_[next_++];
  const int64_t start = NowNanos();
  ASSIGN_OR_RETURN(
      std::unique_ptr<PendingOp> op,
      group_->StartAllReduce(grads_.Slice(r.begin, {r.end - r.begin}), ReduceOp::kSum));
  in_flight_.push_back({std::move(op), start});
  return absl::OkStatus();
}

void GradientBuckets::AddBusy(int64_t begin_ns, int64_t end_ns) {
  const int64_t from = std::max(begin_ns, busy_until_ns_);
  if (end_ns <= from) return;
  overlapped_ += static_cast<double>(end_ns - from) * 1e-9;
  busy_until_ns_ = end_ns;
}

absl::Status GradientBuckets::Poll() {
  size_t closed = 0;
  for (; closed < in_flight_.size(); ++closed) {
    ASSIGN_OR_RETURN(bool complete, in_flight_[closed].op->Test());
    if (!complete) break;
    AddBusy(in_flight_[closed].start_ns, NowNanos());
  }
  in_flight_.erase(in_flight_.begin(), in_flight_.begin() + static_cast<int64_t>(closed));
  return absl::OkStatus();
}

absl::Status GradientBuckets::Ready(int64_t offset) {
  if (!overlap_) return absl::OkStatus();
  while (next_ < ranges_.size() && ranges_[next_].begin >= offset) RETURN_IF_ERROR(StartNext());
  return Poll();
}

absl::Status GradientBuckets::Finish() {
  const int64_t finish_begin = NowNanos();
  // What is in flight now was overlapped until now; from here it is exposed.
  for (const InFlight& f : in_flight_) AddBusy(f.start_ns, finish_begin);
  while (next_ < ranges_.size()) {
    RETURN_IF_ERROR(StartNext());
    // Without overlap, one bucket at a time, as a plain loop of AllReduce.
    if (!overlap_) RETURN_IF_ERROR(in_flight_.back().op->Wait());
  }
  for (InFlight& f : in_flight_) RETURN_IF_ERROR(f.op->Wait());
  in_flight_.clear();
  exposed_ = static_cast<double>(NowNanos() - finish_begin) * 1e-9;
  return absl::OkStatus();
}

}  // namespace ladder::dp
