// The one-rank group: collectives reduce to copies, checked like the real ones
// so that a shape bug shows up in a single-process run too.
#include "src/parallel/self_comm.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::Status SelfCommunicator::AllReduce(Tensor buf, ReduceOp) {
  RETURN_IF_ERROR(CheckBuffer("AllReduce", "buf", buf, buf.device));
  return CheckReducible("AllReduce", buf);
}

absl::Status SelfCommunicator::ReduceScatter(Tensor in, Tensor out) {
  RETURN_IF_ERROR(CheckReducible("ReduceScatter", in));
  return Copy("ReduceScatter", in, out);
}

absl::Status SelfCommunicator::AllGather(Tensor in, Tensor out) {
  return Copy("AllGather", in, out);
}

absl::Status SelfCommunicator::Broadcast(Tensor buf, int root) {
  RETURN_IF_ERROR(CheckBuffer("Broadcast", "buf", buf, buf.device));
  return CheckRoot("Broadcast", root);
}

absl::Status SelfCommunicator::Send(Tensor buf, int peer) {
  RETURN_IF_ERROR(CheckBuffer("Send", "buf", buf, buf.device));
  return CheckPeer("Send", peer);
}

absl::Status SelfCommunicator::Recv(Tensor buf, int peer) {
  RETURN_IF_ERROR(CheckBuffer("Recv", "buf", buf, buf.device));
  return CheckPeer("Recv", peer);
}

absl::Status SelfCommunicator::SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) {
  RETURN_IF_ERROR(CheckBuffer("SendRecv", "send", send, send.device));
  RETURN_IF_ERROR(CheckBuffer("SendRecv", "recv", recv, recv.device));
  RETURN_IF_ERROR(CheckPeer("SendRecv", send_peer));
  return CheckPeer("SendRecv", recv_peer);
}

absl::Status SelfCommunicator::Copy(const char* op, Tensor in, Tensor out) {
  RETURN_IF_ERROR(CheckBuffer(op, "in", in, in.device));
  RETURN_IF_ERROR(CheckBuffer(op, "out", out, in.device));
  RETURN_IF_ERROR(CheckBlocks(op, out, in));
  if (in.data == out.data) return absl::OkStatus();
  if (in.device != Device::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": a group of one copies only CPU tensors; pass the same CUDA buffer as in and out"));
  }
  std::memmove(out.data, in.data, in.bytes());
  return absl::OkStatus();
}

}  // namespace ladder
