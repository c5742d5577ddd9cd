// RoutedCommunicator: one group, two carriers, chosen per call by where the
// buffers live.
//
// A rank that computes on a GPU moves two kinds of buffers over the same
// group: the model's tensors on the device (gradients, activations between
// pipeline stages, vocabulary-parallel partials), and small values in host
// memory (a loss to log, a checkpoint's flags, a benchmark's rates). NCCL
// carries only the first kind and MPI only the second, so a GPU rank's
// communicator for each axis is one of these: calls on Device::kCpu buffers
// go to `host` (MPI), calls on any other device's buffers to `device` (NCCL
// on the backend's stream; under the CUDA simulator, MPI over its host
// memory). Model code keeps calling one Communicator per axis.
//
// Contract (comm.h's, plus):
//  - Both carriers are communicators of the same axis and members, made
//    collectively in the same order on every member; this object owns them.
//  - The members agree on each call's device (comm.h: same calls, same
//    shapes), so every member routes a call to the same carrier.
//  - A call whose buffers are on different devices (ReduceScatter, AllGather,
//    SendRecv) is InvalidArgument and nothing is sent.
//  - Barrier goes to the host carrier: device calls have finished on the
//    device before they return (comm.h), so a host barrier orders both.
//  - stats() sums both carriers' calls made through this object.
// Thread safety: one thread at a time, like every Communicator.
#pragma once

#include <memory>

#include "src/parallel/comm.h"

namespace ladder {

class RoutedCommunicator final : public Communicator {
 public:
  // `host` carries CPU buffers, `device` every other device's. Both non-null,
  // same axis and members (checked: a mismatch is a programming error and
  // aborts).
  RoutedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device);

  absl::Status AllReduce(Tensor buf, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp op) override;
  absl::Status ReduceScatter(Tensor in, Tensor out) override;
  absl::Status AllGather(Tensor in, Tensor out) override;
  absl::Status Broadcast(Tensor buf, int root) override;
  absl::Status Send(Tensor buf, int peer) override;
  absl::Status Recv(Tensor buf, int peer) override;
  absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) override;
  // The device carrier's answer: the buffers a pipeline hands over live there.
  bool StartsPointToPoint() const override { return device_->StartsPointToPoint(); }
  absl::StatusOr<std::unique_ptr<PendingOp>> StartSend(Tensor buf, int peer) override;
  absl::StatusOr<std::unique_ptr<PendingOp>> StartRecv(Tensor buf, int peer) override;
  absl::Status Barrier() override;

 private:
  // The carrier for buffers on `device`.
  Communicator& For(Device device) { return device == Device::kCpu ? *host_ : *device_; }
  // InvalidArgument unless a and b are on the same device.
  static absl::Status SameDevice(const char* op, const char* a_name, const Tensor& a,
                                 const char* b_name, const Tensor& b);
  // A carrier's started operation, added to this stats() when it completes
  // (the carrier records and traces it then).
  std::unique_ptr<PendingOp> Started(std::unique_ptr<PendingOp> inner, const Timer& timer,
                                     size_t bytes);
  // Runs `call` on `carrier` and adds what it recorded to this stats().
  template <typename Call>
  absl::Status Through(Communicator& carrier, Call&& call);

  std::unique_ptr<Communicator> host_, device_;
};

}  // namespace ladder
