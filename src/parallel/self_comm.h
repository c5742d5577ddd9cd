// SelfCommunicator: the group of one rank. A single-process run, and any axis
// of size 1 under mpirun (tp = 1, the embedding group when pp = 1), goes
// through the same Communicator calls as a parallel one without MPI: every
// collective is the identity (a copy where in and out differ), nothing is
// recorded in stats(), and Send/Recv/SendRecv have no peer (InvalidArgument).
//
// Buffers may live on either device; a copy between two distinct CUDA
// buffers is not done here (it needs a stream): pass the same buffer as in
// and out, or use a one-rank NcclCommunicator.
#pragma once

#include <vector>

#include "src/parallel/comm.h"

namespace ladder {

class SelfCommunicator final : public Communicator {
 public:
  // `world_rank` is this process's rank (for messages); members() = {it}.
  SelfCommunicator(Axis axis, int world_rank) : Communicator(axis, {world_rank}, 0) {}

  absl::Status AllReduce(Tensor buf, ReduceOp op) override;
  absl::Status ReduceScatter(Tensor in, Tensor out) override;
  absl::Status AllGather(Tensor in, Tensor out) override;
  absl::Status Broadcast(Tensor buf, int root) override;
  absl::Status Send(Tensor buf, int peer) override;
  absl::Status Recv(Tensor buf, int peer) override;
  absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) override;
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  absl::Status Copy(const char* op, Tensor in, Tensor out);
};

}  // namespace ladder
