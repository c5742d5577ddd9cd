// Each call forwarded to the carrier of its buffers' device (routed_comm.h).
#include "src/parallel/routed_comm.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

const char* DeviceWord(Device d) { return d == Device::kCpu ? "CPU" : "CUDA"; }

}  // namespace

RoutedCommunicator::RoutedCommunicator(std::unique_ptr<Communicator> host,
                                       std::unique_ptr<Communicator> device)
    : Communicator(host->axis(), host->members(), host->rank()),
      host_(std::move(host)),
      device_(std::move(device)) {
  if (device_ == nullptr || device_->axis() != axis() || device_->members() != members() ||
      device_->rank() != rank()) {
    std::fprintf(stderr, "RoutedCommunicator: the two carriers are not the same group\n");
    std::abort();
  }
}

absl::Status RoutedCommunicator::SameDevice(const char* op, const char* a_name, const Tensor& a,
                                            const char* b_name, const Tensor& b) {
  if (a.device == b.device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is a ", DeviceWord(a.device),
                                                 " tensor but ", b_name, " a ",
                                                 DeviceWord(b.device), " one"));
}

template <typename Call>
absl::Status RoutedCommunicator::Through(Communicator& carrier, Call&& call) {
  const CommStats before = carrier.stats();
  absl::Status status = call(carrier);
  const CommStats& after = carrier.stats();
  if (after.calls > before.calls) {
    // The carrier has traced the call already.
    RecordStats(after.seconds - before.seconds, after.bytes - before.bytes);
  }
  return status;
}

absl::Status RoutedCommunicator::AllReduce(Tensor buf, ReduceOp op) {
  return Through(For(buf.device), [&](Communicator& c) { return c.AllReduce(buf, op); });
}

absl::StatusOr<std::unique_ptr<PendingOp>> RoutedCommunicator::StartAllReduce(Tensor buf,
                                                                              ReduceOp op) {
  const Timer timer;
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, For(buf.device).StartAllReduce(buf, op));
  return Started(std::move(inner), timer, buf.bytes());
}

absl::StatusOr<std::unique_ptr<PendingOp>> RoutedCommunicator::StartSend(Tensor buf, int peer) {
  const Timer timer;
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, For(buf.device).StartSend(buf, peer));
  return Started(std::move(inner), timer, buf.bytes());
}

absl::StatusOr<std::unique_ptr<PendingOp>> RoutedCommunicator::StartRecv(Tensor buf, int peer) {
  const Timer timer;
  ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> inner, For(buf.device).StartRecv(buf, peer));
  return Started(std::move(inner), timer, buf.bytes());
}

std::unique_ptr<PendingOp> RoutedCommunicator::Started(std::unique_ptr<PendingOp> inner,
                                                       const Timer& timer, size_t bytes) {
  return std::make_unique<WrappedOp>(std::move(inner), 0, [this, timer, bytes] {
    RecordStats(timer.Seconds(), static_cast<int64_t>(bytes));
  });
}

absl::Status RoutedCommunicator::ReduceScatter(Tensor in, Tensor out) {
  RETURN_IF_ERROR(SameDevice("ReduceScatter", "in", in, "out", out));
  return Through(For(in.device), [&](Communicator& c) { return c.ReduceScatter(in, out); });
}

absl::Status RoutedCommunicator::AllGather(Tensor in, Tensor out) {
  RETURN_IF_ERROR(SameDevice("AllGather", "in", in, "out", out));
  return Through(For(in.device), [&](Communicator& c) { return c.AllGather(in, out); });
}

absl::Status RoutedCommunicator::Broadcast(Tensor buf, int root) {
  return Through(For(buf.device), [&](Communicator& c) { return c.Broadcast(buf, root); });
}

absl::Status RoutedCommunicator::Send(Tensor buf, int peer) {
  return Through(For(buf.device), [&](Communicator& c) { return c.Send(buf, peer); });
}

absl::Status RoutedCommunicator::Recv(Tensor buf, int peer) {
  return Through(For(buf.device), [&](Communicator& c) { return c.Recv(buf, peer); });
}

absl::Status RoutedCommunicator::SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) {
  RETURN_IF_ERROR(SameDevice("SendRecv", "send", send, "recv", recv));
  return Through(For(send.device), [&](Communicator& c) {
    return c.SendRecv(send, send_peer, recv, recv_peer);
  });
}

absl::Status RoutedCommunicator::Barrier() {
  return Through(*host_, [](Communicator& c) { return c.Barrier(); });
}

}  // namespace ladder
