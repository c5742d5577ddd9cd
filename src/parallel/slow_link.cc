#include "src/parallel/slow_link.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ladder {

bool SlowLink::Crosses(Axis axis) const {
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

absl::StatusOr<SlowLink> ParseSlowLink(const std::string& spec) {
  SlowLink link;
  if (spec.empty()) return link;
  const auto bad = [&spec](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--slow-link '", spec, "': ", why, " (the form is AXES:US:GBPS, e.g. tensor:10:12.5)"));
  };
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 3) return bad("three fields separated by ':' are needed");
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(parts[0], ','))) {
    const Axis* found = std::find_if(std::begin(kAllAxes), std::end(kAllAxes),
                                     [&name](Axis a) { return name == AxisName(a); });
    if (found == std::end(kAllAxes)) return bad(absl::StrCat("'", name, "' is not an axis"));
    link.axes.push_back(*found);
  }
  char* end = nullptr;
  const double us = std::strtod(parts[1].c_str(), &end);
  if (parts[1].empty() || *end != 0 || !(us >= 0) || !std::isfinite(us)) {
    return bad("the latency must be a number of microseconds >= 0");
  }
  const double gbps = std::strtod(parts[2].c_str(), &end);
  if (parts[2].empty() || *end != 0 || !(gbps > 0) || !std::isfinite(gbps)) {
    return bad("the bandwidth must be a positive number of GB/s");
  }
  link.latency_s = us * 1e-6;
  link.bytes_per_s = gbps * 1e9;
  return link;
}

SlowLinkCommunicator::SlowLinkCommunicator(std::unique_ptr<Communicator> carrier,
                                           const SlowLink& link)
    : Communicator(carrier->axis(), carrier->members(), carrier->rank()),
      carrier_(std::move(carrier)),
      link_(link) {}

absl::Status SlowLinkCommunicator::Wait(absl::Status status, const char* op, const Timer& timer,
                                        double steps, double wire_bytes, int64_t bytes) {
  if (!status.ok()) return status;
  std::this_thread::sleep_for(std::chrono::duration<double>(Seconds(steps, wire_bytes)));
  Record(op, timer, bytes);
  return status;
}

absl::Status SlowLinkCommunicator::AllReduce(Tensor buf, ReduceOp op) {
  const Timer timer;
  const double p = size(), n = static_cast<double>(buf.bytes());
  return Wait(carrier_->AllReduce(buf, op), "all-reduce", timer, 2 * (p - 1), 2 * (p - 1) * n / p,
              static_cast<int64_t>(n));
}

std::unique_ptr<PendingOp> SlowLinkCommunicator::Queue(std::unique_ptr<PendingOp> inner,
                                                       int64_t* free_ns, const Timer& timer,
                                                       const char* op, double steps,
                                                       double wire_bytes, int64_t bytes) {
  const double seconds = Seconds(steps, wire_bytes);
  *free_ns = std::max(*free_ns, timer.start_nanos()) + static_cast<int64_t>(seconds * 1e9);
  return std::make_unique<WrappedOp>(std::move(inner), *free_ns,
                                     [this, timer, op, bytes] { Record(op, timer, bytes); });
}

absl::StatusOr<std::unique_ptr<PendingOp>> SlowLinkCommunicator::StartAllReduce(Tensor buf,
                                                                                ReduceOp op) {
  const Timer timer;
  const double p = size(), n = static_cast<double>(buf.bytes());
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, carrier_->StartAllReduce(buf, op));
  return Queue(std::move(inner), &link_free_ns_, timer, "all-reduce", 2 * (p - 1),
               2 * (p - 1) * n / p, static_cast<int64_t>(n));
}

absl::StatusOr<std::unique_ptr<PendingOp>> SlowLinkCommunicator::StartSend(Tensor buf, int peer) {
  const Timer timer;
  const double n = static_cast<double>(buf.bytes());
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, carrier_->StartSend(buf, peer));
  return Queue(std::move(inner), &send_free_ns_, timer, "send", 1, n, static_cast<int64_t>(n));
}

absl::StatusOr<std::unique_ptr<PendingOp>> SlowLinkCommunicator::StartRecv(Tensor buf, int peer) {
  const Timer timer;
  const double n = static_cast<double>(buf.bytes());
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, carrier_->StartRecv(buf, peer));
  return Queue(std::move(inner), &recv_free_ns_, timer, "recv", 1, n, static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::ReduceScatter(Tensor in, Tensor out) {
  const Timer timer;
  const double p = size(), n = static_cast<double>(in.bytes());
  return Wait(carrier_->ReduceScatter(in, out), "reduce-scatter", timer, p - 1, (p - 1) * n / p,
              static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::AllGather(Tensor in, Tensor out) {
  const Timer timer;
  const double p = size(), n = static_cast<double>(out.bytes());
  return Wait(carrier_->AllGather(in, out), "all-gather", timer, p - 1, (p - 1) * n / p,
              static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::Broadcast(Tensor buf, int root) {
  const Timer timer;
  const double n = static_cast<double>(buf.bytes());
  return Wait(carrier_->Broadcast(buf, root), "broadcast", timer, size() - 1, n,
              static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::Send(Tensor buf, int peer) {
  const Timer timer;
  const double n = static_cast<double>(buf.bytes());
  return Wait(carrier_->Send(buf, peer), "send", timer, 1, n, static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::Recv(Tensor buf, int peer) {
  const Timer timer;
  const double n = static_cast<double>(buf.bytes());
  return Wait(carrier_->Recv(buf, peer), "recv", timer, 1, n, static_cast<int64_t>(n));
}

absl::Status SlowLinkCommunicator::SendRecv(Tensor send, int send_peer, Tensor recv,
                                            int recv_peer) {
  const Timer timer;
  const double s = static_cast<double>(send.bytes()), r = static_cast<double>(recv.bytes());
  return Wait(carrier_->SendRecv(send, send_peer, recv, recv_peer), "send-recv", timer, 1,
              std::max(s, r), static_cast<int64_t>(s + r));
}

absl::Status SlowLinkCommunicator::Barrier() {
  const Timer timer;
  return Wait(carrier_->Barrier(), "barrier", timer, 2.0 * (size() - 1), 0, 0);
}

}  // namespace ladder
