// The communicator interface: the collectives and point-to-point messages of
// one axis group (src/parallel/grid.h), whatever carries them.
//
// Implementations: MpiCommunicator (host buffers over MPI; mpi_comm.h),
// NcclCommunicator (device buffers over NCCL; nccl_comm.h, CUDA builds),
// SelfCommunicator (a group of one; self_comm.h) and RoutedCommunicator (a
// device backend's groups: each call to MPI or to the device's carrier by
// where its buffers live; routed_comm.h). Parallel model code is written
// against this class only.
//
// Contract shared by every implementation:
//  - Calls are collective over the group unless noted: every member makes the
//    same calls in the same order with the same shapes and dtypes.
//  - Ranks and peers are group ranks (0 .. size()-1); members() maps them to
//    world ranks (for messages).
//  - Reductions are deterministic: for a fixed group and buffer size the
//    result is bitwise identical on every member and from run to run (each
//    implementation says how it guarantees this). ReduceOp::kSum of f32 in a
//    group of two or more is still not the order a single process would add
//    in: layouts agree to rounding, not bit for bit. bf16 reduces in fp32
//    per combining step and rounds each step's result to bf16 (to nearest
//    even), as NCCL does: a bf16 activation's sum over a tensor-parallel
//    group carries about one bf16 rounding per rank.
//  - Buffers must be contiguous, non-empty views on the implementation's
//    device; a wrong shape, dtype, device, peer or root is InvalidArgument and
//    nothing is sent.
//  - Calls return when the operation is complete (for NCCL: finished on the
//    GPU), so the buffers are free to reuse.
//  - Hang watchdog: a call that has not completed after the timeout given at
//    creation does not return. The rank prints one line to stderr,
//      ladder: rank R timed out after Ns in <op> on the <axis> axis waiting
//      for world rank(s) ...
//    and aborts the whole job with exit code 3 (watchdog.h). Timeout 0 waits
//    forever.
//
// Statistics: every call on a group of two or more adds to stats() its wall
// time (issue to completion, including waiting for slower peers) and its
// payload bytes, defined as the size of the *full* buffer of the call, on
// the calling rank:
//   AllReduce: buf.bytes()      ReduceScatter: in.bytes() (= size * out)
//   AllGather: out.bytes()      Broadcast: buf.bytes()
//   Send / Recv: buf.bytes()    SendRecv: send.bytes() + recv.bytes()
//   Barrier: 0
// This is what a plan predicts from tensor sizes alone. Wire traffic per
// rank follows from it with the algorithm's factor, e.g. 2(p-1)/p for a ring
// all-reduce and (p-1)/p for reduce-scatter and all-gather. A group of one
// moves nothing and records nothing.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/core/status.h"
#include "src/core/tensor.h"
#include "src/core/timer.h"
#include "src/core/trace.h"
#include "src/parallel/grid.h"

namespace ladder {

enum class ReduceOp { kSum, kMax };

// An operation a Start call began (Communicator::StartAllReduce, StartSend,
// StartRecv), in flight
// until Test or Wait finds it complete. Owned by the caller, used on the
// communicator's thread. Its buffers must be neither read nor written until
// then. Destroying it first waits for it (errors are dropped), so a buffer
// never outlives an operation on it. After Test returns true, or either call
// an error, later calls return the same at once.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // True once complete: the buffers hold the result and are free. Also
  // advances the operation: MPI progresses a non-blocking collective only
  // inside MPI calls, so a caller that computes meanwhile tests between its
  // pieces of work. Never blocks.
  virtual absl::StatusOr<bool> Test() = 0;
  // Blocks until complete, under the communicator's hang watchdog.
  virtual absl::Status Wait() = 0;
};

struct CommStats {
  double seconds = 0;  // wall time inside calls
  int64_t bytes = 0;   // payload, as defined above
  int64_t calls = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  Axis axis() const { return axis_; }
  int size() const { return static_cast<int>(members_.size()); }
  int rank() const { return rank_; }
  // World rank of each group rank.
  const std::vector<int>& members() const { return members_; }

  // buf = op over every member's buf, in place. f32 or i32.
  virtual absl::Status AllReduce(Tensor buf, ReduceOp op) = 0;
  // AllReduce that returns with the operation in flight, so the caller can
  // compute while it travels (the data-parallel gradient buckets overlapped
  // with the backward: src/parallel/data_parallel/gradient_buckets.h). The
  // same result, bit for bit, as AllReduce of the same buffer. Collective:
  // every member starts the same operations in the same order. Until each
  // is complete, no other call may be made on this communicator except
  // further StartAllReduce calls. stats() counts the call when a Test or
  // Wait finds it complete, its seconds from the start until then. The
  // default runs AllReduce and returns the operation complete (no overlap);
  // MPI, NCCL and the wrappers over them start it for real.
  virtual absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp op);
  // Sum of every member's `in` (size() * out.numel() elements), of which
  // member r receives block r (elements [r*n, (r+1)*n), n = out.numel()).
  // f32 or i32; in and out must not overlap.
  virtual absl::Status ReduceScatter(Tensor in, Tensor out) = 0;
  // out = every member's in (n elements each) concatenated by rank:
  // out.numel() == size() * n. `in` may be this rank's own block of `out`
  // (in place, as ZeRO-1 gathers parameter shards); otherwise they must not
  // overlap. Any dtype.
  virtual absl::Status AllGather(Tensor in, Tensor out) = 0;
  // Every member's buf = root's buf. Any dtype.
  virtual absl::Status Broadcast(Tensor buf, int root) = 0;
  // Point to point, not collective: Send to `peer` must be matched by a Recv
  // from this rank of the same byte size; messages between two ranks arrive
  // in the order sent. peer != rank(). Any dtype.
  virtual absl::Status Send(Tensor buf, int peer) = 0;
  virtual absl::Status Recv(Tensor buf, int peer) = 0;
  // Send `send` to send_peer and receive `recv` from recv_peer at the same
  // time, returning when both are done. A pipeline stage that sends its
  // activations forward while its neighbour sends gradients back would
  // deadlock with a blocking Send on each side; posted together, neither
  // waits on the other. The peers may be the same rank; buffers must not
  // overlap.
  virtual absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) = 0;
  // Send and Recv that return with the transfer in flight, so a pipeline
  // stage computes while its activations travel forward and its gradients
  // back (pipeline_parallel/schedule.h, overlap). The same messages as Send
  // and Recv, matched in the same order: a started send matches a Recv or a
  // started receive alike. The buffer must be left alone until the op is
  // complete. Point-to-point calls, started or not, may be made while
  // others are in flight; collectives may not. Only where
  // StartsPointToPoint(): the default refuses (Unimplemented), because
  // a blocking stand-in could deadlock two stages that each start a send
  // before they receive. stats() counts the call when it completes.
  virtual bool StartsPointToPoint() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<PendingOp>> StartSend(Tensor buf, int peer);
  virtual absl::StatusOr<std::unique_ptr<PendingOp>> StartRecv(Tensor buf, int peer);
  virtual absl::Status Barrier() = 0;

  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = {}; }

 protected:
  Communicator(Axis axis, std::vector<int> members, int rank)
      : axis_(axis), members_(std::move(members)), rank_(rank) {}

  // Shared argument checks; `op` names the call in the message.
  absl::Status CheckBuffer(const char* op, const char* what, const Tensor& t, Device device) const;
  // f32, bf16 or i32 (the reducible dtypes).
  absl::Status CheckReducible(const char* op, const Tensor& t) const;
  // whole.numel() == size() * block.numel(), same dtype.
  absl::Status CheckBlocks(const char* op, const Tensor& whole, const Tensor& block) const;
  absl::Status CheckPeer(const char* op, int peer) const;
  absl::Status CheckRoot(const char* op, int root) const;

  // Adds one call, timed by `timer` from its start until now, to stats()
  // and, while a trace records (src/core/trace.h), a span on the comm track
  // named "<axis> <op>" with its bytes. A group of one records nothing.
  void Record(const char* op, const Timer& timer, int64_t bytes) {
    if (size() == 1) return;
    const int64_t begin = timer.start_nanos(), end = NowNanos();
    if (TraceRecorder::active() != nullptr) [[unlikely]]
      TraceCall(op, begin, end, bytes);
    RecordStats(static_cast<double>(end - begin) * 1e-9, bytes);
  }
  // Stats only: for a wrapper whose carrier has recorded (and traced) the call.
  void RecordStats(double seconds, int64_t bytes) {
    if (size() == 1) return;
    stats_.seconds += seconds;
    stats_.bytes += bytes;
    ++stats_.calls;
  }

 private:
  void TraceCall(const char* op, int64_t begin_ns, int64_t end_ns, int64_t bytes) const;

  Axis axis_;
  std::vector<int> members_;
  int rank_;
  CommStats stats_;
};

// A PendingOp over a carrier's (the wrapping communicators': slow link,
// routed): complete when `inner` is and, if `until_ns` is nonzero, the clock
// (NowNanos) has reached it; then `done` runs once (the wrapper's record).
class WrappedOp final : public PendingOp {
 public:
  WrappedOp(std::unique_ptr<PendingOp> inner, int64_t until_ns, std::function<void()> done)
      : inner_(std::move(inner)), until_ns_(until_ns), done_(std::move(done)) {}
  ~WrappedOp() override { Wait().IgnoreError(); }
  absl::StatusOr<bool> Test() override;
  absl::Status Wait() override;

 private:
  void Complete();

  std::unique_ptr<PendingOp> inner_;
  int64_t until_ns_;
  std::function<void()> done_;
  bool complete_ = false;
  absl::Status error_;
};

// Every member's values (`mine`, the same count on every member), on every
// member, concatenated in rank order: small bookkeeping such as steps,
// checksums or timings. Moved as bytes, so any plain type travels (the
// communicators reduce 32-bit types only; a gather combines nothing).
// Collective over `c`; errors are the communicator's.
template <typename T>
absl::StatusOr<std::vector<T>> AllGatherValues(Communicator& c, std::vector<T> mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  const int64_t bytes = static_cast<int64_t>(mine.size() * sizeof(T));
  std::vector<T> all(mine.size() * static_cast<size_t>(c.size()));
  RETURN_IF_ERROR(c.AllGather(Tensor(mine.data(), DType::kI8, {bytes}, Device::kCpu),
                              Tensor(all.data(), DType::kI8, {bytes * c.size()}, Device::kCpu)));
  return all;
}

// A rank's communicators, one per axis (built by CreateHostCommunicators in
// mpi_comm.h, each wrapped in a RoutedCommunicator for a device backend).
struct Communicators {
  std::array<std::unique_ptr<Communicator>, kNumAxes> by_axis;
  Communicator& operator[](Axis axis) const { return *by_axis[static_cast<int>(axis)]; }
};

}  // namespace ladder
