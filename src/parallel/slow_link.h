// SlowLinkCommunicator: a group whose every call waits as if it crossed a
// link of a given latency and bandwidth (`--slow-link AXES:US:GBPS`).
//
// The ranks of one machine talk over shared memory, microseconds apart; the
// ranks of a cluster's two nodes talk over a network link ten to a hundred
// times slower than the links inside a node. Which parallel axis crosses
// that link decides a job's speed (the topology lesson,
// scripts/experiments/08-topology.sh): tensor parallelism's two all-reduces
// per layer, forward and backward, are on the critical path, a data-parallel
// gradient reduction once per step much less so. This communicator lets one
// machine show that: the named axes' groups run their calls on the real
// carrier, then wait what the same call would take over the slow link, in
// the alpha-beta model of ring algorithms with p members, latency a and
// bandwidth b, and n the call's payload bytes (comm.h's definition):
//   AllReduce                   2 (p - 1) (a + n / (p b))
//   ReduceScatter, AllGather      (p - 1) (a + n / (p b))
//   Broadcast (pipelined ring)    (p - 1) a + n / b
//   Send, Recv                    a + n / b
//   SendRecv (full duplex)        a + max(send, recv) / b
//   Barrier                       2 (p - 1) a
// The wait is a sleep, so like a network it occupies no core. stats() and
// the trace count each call's whole time, carrier and wait.
// A started all-reduce (StartAllReduce) is in flight on the link from its
// start, or from when the operations started before it leave the link (one
// link carries one transfer at a time): it completes when the carrier's has
// and that transfer's time has passed, so computing meanwhile hides it.
// Started sends and receives (StartSend, StartRecv) queue the same way, each
// direction on its own (full duplex).
//
// Contract: comm.h's; the carrier's results and errors unchanged (a failed
// call does not wait). Thread safety: one thread at a time, like every
// Communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"

namespace ladder {

// The slow link and the axes whose groups cross it.
struct SlowLink {
  std::vector<Axis> axes;
  double latency_s = 0;
  double bytes_per_s = 0;
  bool Crosses(Axis axis) const;
};

// "AXES:US:GBPS": comma-separated axis names (tensor, data, pipeline,
// context, embedding, world), the latency in microseconds and the bandwidth
// in GB/s (1e9 bytes), e.g. "tensor:10:12.5". InvalidArgument naming the
// spec and the form otherwise. The empty spec is no slow link (no axes).
absl::StatusOr<SlowLink> ParseSlowLink(const std::string& spec);

class SlowLinkCommunicator final : public Communicator {
 public:
  // Wraps `carrier` (owned; its axis, members and rank are this one's).
  SlowLinkCommunicator(std::unique_ptr<Communicator> carrier, const SlowLink& link);

  absl::Status AllReduce(Tensor buf, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp op) override;
  absl::Status ReduceScatter(Tensor in, Tensor out) override;
  absl::Status AllGather(Tensor in, Tensor out) override;
  absl::Status Broadcast(Tensor buf, int root) override;
  absl::Status Send(Tensor buf, int peer) override;
  absl::Status Recv(Tensor buf, int peer) override;
  absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) override;
  bool StartsPointToPoint() const override { return carrier_->StartsPointToPoint(); }
  absl::StatusOr<std::unique_ptr<PendingOp>> StartSend(Tensor buf, int peer) override;
  absl::StatusOr<std::unique_ptr<PendingOp>> StartRecv(Tensor buf, int peer) override;
  absl::Status Barrier() override;

 private:
  // Waits out `steps` latencies and `bytes` at the link's bandwidth after
  // `status` succeeded, then records the call (op, bytes) from `timer`.
  absl::Status Wait(absl::Status status, const char* op, const Timer& timer, double steps,
                    double wire_bytes, int64_t bytes);

  // The link's time for a call of `steps` latencies and `wire_bytes`.
  double Seconds(double steps, double wire_bytes) const {
    return steps * link_.latency_s + wire_bytes / link_.bytes_per_s;
  }

  std::unique_ptr<Communicator> carrier_;
  SlowLink link_;
  // A started transfer of `wire_bytes` in `steps` latencies, queued behind
  // the ones before it on `free_ns` (advanced past it): the carrier's op
  // wrapped to complete no earlier than the transfer, recorded as `op`.
  std::unique_ptr<PendingOp> Queue(std::unique_ptr<PendingOp> inner, int64_t* free_ns,
                                   const Timer& timer, const char* op, double steps,
                                   double wire_bytes, int64_t bytes);

  int64_t link_free_ns_ = 0;  // when the started all-reduces leave the link
  // The same for started sends and receives: the link is full duplex, one
  // transfer at a time in each direction.
  int64_t send_free_ns_ = 0, recv_free_ns_ = 0;
};

}  // namespace ladder
