// Argument checks every communicator runs before it touches the wire, so a
// shape mistake is one InvalidArgument on the rank that made it rather than a
// hang or a corrupted buffer on its peers.
#include "src/parallel/comm.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ladder {

absl::Status Communicator::CheckBuffer(const char* op, const char* what, const Tensor& t,
                                       Device device) const {
  if (t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is empty"));
  }
  if (t.rank < 1 || t.rank > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has rank ", t.rank));
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", what, " has shape ", t.ShapeString()));
    }
  }
  if (t.device != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " is not a ", device == Device::kCpu ? "CPU" : "CUDA", " tensor"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckReducible(const char* op, const Tensor& t) const {
  if (t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kI32) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(op, ": only f32, bf16 and i32 can be reduced"));
}

absl::Status Communicator::CheckBlocks(const char* op, const Tensor& whole,
                                       const Tensor& block) const {
  if (whole.dtype != block.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": in and out have different dtypes"));
  }
  if (whole.numel() != size() * block.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", whole.numel(), " elements are not ",
                                                   size(), " blocks of ", block.numel(),
                                                   " (the group has ", size(), " ranks)"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": peer ", peer, " is not another rank of the ", AxisName(axis()),
                     " group (size ", size(), ", this rank ", rank(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckRoot(const char* op, int root) const {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": root ", root, " is outside the ",
                                                   AxisName(axis()), " group of size ", size()));
  }
  return absl::OkStatus();
}

namespace {

// An operation that completed inside its Start call.
class CompletedOp final : public PendingOp {
 public:
  absl::StatusOr<bool> Test() override { return true; }
  absl::Status Wait() override { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<PendingOp>> Communicator::StartAllReduce(Tensor buf, ReduceOp op) {
  RETURN_IF_ERROR(AllReduce(buf, op));
  return std::make_unique<CompletedOp>();
}

absl::StatusOr<std::unique_ptr<PendingOp>> Communicator::StartSend(Tensor, int) {
  return absl::UnimplementedError(
      absl::StrCat(AxisName(axis()), " group: this communicator does not start sends"));
}

absl::StatusOr<std::unique_ptr<PendingOp>> Communicator::StartRecv(Tensor, int) {
  return absl::UnimplementedError(
      absl::StrCat(AxisName(axis()), " group: this communicator does not start receives"));
}

void WrappedOp::Complete() {
  complete_ = true;
  if (done_) done_();
}

absl::StatusOr<bool> WrappedOp::Test() {
  if (complete_ || !error_.ok()) return error_.ok() ? absl::StatusOr<bool>(true) : error_;
  absl::StatusOr<bool> inner = inner_->Test();
  if (!inner.ok()) {
    error_ = inner.status();
    return error_;
  }
  if (!*inner || (until_ns_ != 0 && NowNanos() < until_ns_)) return false;
  Complete();
  return true;
}

absl::Status WrappedOp::Wait() {
  if (complete_ || !error_.ok()) return error_;
  error_ = inner_->Wait();
  if (!error_.ok()) return error_;
  const int64_t left = until_ns_ - NowNanos();
  if (until_ns_ != 0 && left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
  Complete();
  return absl::OkStatus();
}

void Communicator::TraceCall(const char* op, int64_t begin_ns, int64_t end_ns,
                             int64_t bytes) const {
  TraceEvent* e = TraceInterval(TraceTrack::kComm, "comm", "", begin_ns, end_ns);
  if (e == nullptr) return;
  std::snprintf(e->name, sizeof e->name, "%s %s", AxisName(axis_), op);
  e->AddArg("bytes", bytes);
  e->text_key = "axis";
  e->text = AxisName(axis_);
}

}  // namespace ladder
