// NCCL communicator: enqueue on the stream, then poll to completion under the
// watchdog (see nccl_comm.h).
#include "src/parallel/nccl_comm.h"

#include <nccl.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/parallel/watchdog.h"

namespace ladder {
namespace {

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI8:
      return ncclInt8;
  }
  return ncclFloat32;
}

absl::Status NcclError(ncclResult_t r, ncclComm_t comm, const char* op) {
  return absl::InternalError(absl::StrCat(op, ": ", ncclGetErrorString(r),
                                          comm != nullptr ? ": " : "",
                                          comm != nullptr ? ncclGetLastError(comm) : ""));
}

// Polls until the communicator has no call in progress (a non-blocking
// communicator's calls may return ncclInProgress).
absl::Status WaitReady(ncclComm_t comm, Watchdog dog, const char* op) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return NcclError(r, comm, op);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, comm, op);
    dog.Pause();
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Axis axis, std::vector<int> members, int rank, ncclComm_t comm,
                   cudaStream_t stream, cudaStream_t side, int32_t* scratch, double timeout)
      : Communicator(axis, std::move(members), rank),
        comm_(comm),
        stream_(stream),
        side_(side),
        scratch_(scratch),
        timeout_(timeout) {
    for (int i = 0; i < size(); ++i) {
      if (i != rank) others_.push_back(this->members()[i]);
    }
  }
  ~NcclCommunicator() override {
    // Flush, then free. Errors at teardown have no one left to report to.
    ncclCommFinalize(comm_);
    WaitReady(comm_, Dog("finalize", others_), "finalize").IgnoreError();
    ncclCommDestroy(comm_);
    cudaStreamDestroy(side_);
    cudaFree(scratch_);
  }

  absl::Status AllReduce(Tensor buf, ReduceOp op) override {
    RETURN_IF_ERROR(CheckBuffer("AllReduce", "buf", buf, Device::kCuda));
    RETURN_IF_ERROR(CheckReducible("AllReduce", buf));
    Timer timer;
    ncclResult_t r = ncclAllReduce(buf.data, buf.data, buf.numel(), NcclType(buf.dtype),
                                   op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, stream_);
    return Finish(r, "all-reduce", others_, timer, buf.bytes());
  }

  // On the side stream, after what the compute stream has enqueued so far:
  // the kernels enqueued after this call run alongside the reduction.
  absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp op) override {
    RETURN_IF_ERROR(CheckBuffer("AllReduce", "buf", buf, Device::kCuda));
    RETURN_IF_ERROR(CheckReducible("AllReduce", buf));
    auto pending = std::make_unique<Pending>(this, static_cast<int64_t>(buf.bytes()));
    RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&pending->ready, cudaEventDisableTiming)));
    RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&pending->done, cudaEventDisableTiming)));
    RETURN_IF_ERROR(Cuda(cudaEventRecord(pending->ready, stream_)));
    RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(side_, pending->ready, 0)));
    const ncclResult_t r = ncclAllReduce(buf.data, buf.data, buf.numel(), NcclType(buf.dtype),
                                         op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, side_);
    if (r != ncclSuccess && r != ncclInProgress) return NcclError(r, comm_, "all-reduce");
    RETURN_IF_ERROR(WaitReady(comm_, Dog("all-reduce", others_), "all-reduce"));
    RETURN_IF_ERROR(Cuda(cudaEventRecord(pending->done, side_)));
    pending->started = true;
    return pending;
  }

  absl::Status ReduceScatter(Tensor in, Tensor out) override {
    RETURN_IF_ERROR(CheckBuffer("ReduceScatter", "in", in, Device::kCuda));
    RETURN_IF_ERROR(CheckBuffer("ReduceScatter", "out", out, Device::kCuda));
    RETURN_IF_ERROR(CheckReducible("ReduceScatter", in));
    RETURN_IF_ERROR(CheckBlocks("ReduceScatter", in, out));
    Timer timer;
    ncclResult_t r = ncclReduceScatter(in.data, out.data, out.numel(), NcclType(in.dtype), ncclSum,
                                       comm_, stream_);
    return Finish(r, "reduce-scatter", others_, timer, in.bytes());
  }

  // NCCL treats in == this rank's block of out as in place.
  absl::Status AllGather(Tensor in, Tensor out) override {
    RETURN_IF_ERROR(CheckBuffer("AllGather", "in", in, Device::kCuda));
    RETURN_IF_ERROR(CheckBuffer("AllGather", "out", out, Device::kCuda));
    RETURN_IF_ERROR(CheckBlocks("AllGather", out, in));
    Timer timer;
    ncclResult_t r =
        ncclAllGather(in.data, out.data, in.numel(), NcclType(in.dtype), comm_, stream_);
    return Finish(r, "all-gather", others_, timer, out.bytes());
  }

  absl::Status Broadcast(Tensor buf, int root) override {
    RETURN_IF_ERROR(CheckBuffer("Broadcast", "buf", buf, Device::kCuda));
    RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    Timer timer;
    ncclResult_t r =
        ncclBroadcast(buf.data, buf.data, buf.numel(), NcclType(buf.dtype), root, comm_, stream_);
    std::vector<int> waiting_for = rank() == root ? others_ : std::vector<int>{members()[root]};
    return Finish(r, "broadcast", waiting_for, timer, buf.bytes());
  }

  absl::Status Send(Tensor buf, int peer) override {
    RETURN_IF_ERROR(CheckBuffer("Send", "buf", buf, Device::kCuda));
    RETURN_IF_ERROR(CheckPeer("Send", peer));
    Timer timer;
    ncclResult_t r = ncclSend(buf.data, buf.numel(), NcclType(buf.dtype), peer, comm_, stream_);
    return Finish(r, "send", {members()[peer]}, timer, buf.bytes());
  }

  absl::Status Recv(Tensor buf, int peer) override {
    RETURN_IF_ERROR(CheckBuffer("Recv", "buf", buf, Device::kCuda));
    RETURN_IF_ERROR(CheckPeer("Recv", peer));
    Timer timer;
    ncclResult_t r = ncclRecv(buf.data, buf.numel(), NcclType(buf.dtype), peer, comm_, stream_);
    return Finish(r, "recv", {members()[peer]}, timer, buf.bytes());
  }

  // Grouped, NCCL issues both at once (no send waits for the other side's).
  absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) override {
    RETURN_IF_ERROR(CheckBuffer("SendRecv", "send", send, Device::kCuda));
    RETURN_IF_ERROR(CheckBuffer("SendRecv", "recv", recv, Device::kCuda));
    RETURN_IF_ERROR(CheckPeer("SendRecv", send_peer));
    RETURN_IF_ERROR(CheckPeer("SendRecv", recv_peer));
    Timer timer;
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
      r = ncclSend(send.data, send.numel(), NcclType(send.dtype), send_peer, comm_, stream_);
    }
    if (r == ncclSuccess) {
      r = ncclRecv(recv.data, recv.numel(), NcclType(recv.dtype), recv_peer, comm_, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    std::vector<int> peers = {members()[recv_peer]};
    if (send_peer != recv_peer) peers.push_back(members()[send_peer]);
    return Finish(r, "send-recv", peers, timer, send.bytes() + recv.bytes());
  }

  // NCCL has no barrier: a one-element all-reduce is one.
  absl::Status Barrier() override {
    Timer timer;
    ncclResult_t r = ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
    return Finish(r, "barrier", others_, timer, 0);
  }

 private:
  Watchdog Dog(const char* op, std::vector<int> waiting_for) const {
    ncclComm_t comm = comm_;
    return Watchdog(timeout_, members()[rank()], op, axis(), std::move(waiting_for),
                    [comm] { ncclCommAbort(comm); });
  }

  // Waits for an enqueued operation: first for NCCL to have issued it, then
  // for the stream to have run it.
  absl::Status Finish(ncclResult_t r, const char* op, const std::vector<int>& waiting_for,
                      const Timer& timer, size_t bytes) {
    if (r != ncclSuccess && r != ncclInProgress) return NcclError(r, comm_, op);
    Watchdog dog = Dog(op, waiting_for);
    RETURN_IF_ERROR(WaitReady(comm_, dog, op));
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        return absl::InternalError(absl::StrCat(op, ": ", cudaGetErrorString(q)));
      }
      // A peer's failure shows up as the communicator's asynchronous error.
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) return NcclError(state, comm_, op);
      dog.Pause();
    }
    Record(op, timer, static_cast<int64_t>(bytes));
    return absl::OkStatus();
  }

  static absl::Status Cuda(cudaError_t e) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("all-reduce: ", cudaGetErrorString(e)));
  }

  // A started all-reduce: complete when its `done` event has fired on the
  // side stream; the communicator's asynchronous error reports a peer's
  // failure meanwhile.
  class Pending final : public PendingOp {
   public:
    Pending(NcclCommunicator* comm, int64_t bytes) : comm_(comm), bytes_(bytes) {}
    ~Pending() override {
      Wait().IgnoreError();
      if (ready != nullptr) cudaEventDestroy(ready);
      if (done != nullptr) cudaEventDestroy(done);
    }
    absl::StatusOr<bool> Test() override {
      if (!started || !error_.ok()) return error_.ok() ? absl::StatusOr<bool>(true) : error_;
      if (complete_) return true;
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaErrorNotReady) {
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm_->comm_, &state);
        if (state == ncclSuccess || state == ncclInProgress) return false;
        error_ = NcclError(state, comm_->comm_, "all-reduce");
        return error_;
      }
      if (q != cudaSuccess) {
        error_ = Cuda(q);
        return error_;
      }
      complete_ = true;
      comm_->Record("all-reduce", timer_, bytes_);
      return true;
    }
    absl::Status Wait() override {
      Watchdog dog = comm_->Dog("all-reduce", comm_->others_);
      for (;;) {
        absl::StatusOr<bool> complete = Test();
        if (!complete.ok()) return complete.status();
        if (*complete) return absl::OkStatus();
        dog.Pause();
      }
    }

    cudaEvent_t ready = nullptr, done = nullptr;
    bool started = false;  // false: the start failed, nothing in flight

   private:
    NcclCommunicator* comm_;
    int64_t bytes_;
    Timer timer_;
    bool complete_ = false;
    absl::Status error_;
  };

  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaStream_t side_;  // started operations (StartAllReduce)
  int32_t* scratch_;  // one int on the device, for Barrier
  double timeout_;
  std::vector<int> others_;  // world ranks of the other members
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Communicator& host,
                                                                     cudaStream_t stream,
                                                                     double timeout_seconds) {
  // The id travels as bytes over the host group.
  ncclUniqueId id{};
  if (host.rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(r, nullptr, "ncclGetUniqueId");
  }
  RETURN_IF_ERROR(
      host.Broadcast(Tensor(&id, DType::kI8, {static_cast<int64_t>(sizeof(id))}, Device::kCpu), 0));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, host.size(), id, host.rank(), &config);
  if (r != ncclSuccess && r != ncclInProgress) return NcclError(r, comm, "ncclCommInitRankConfig");
  std::vector<int> others;
  for (int i = 0; i < host.size(); ++i) {
    if (i != host.rank()) others.push_back(host.members()[i]);
  }
  const int me = host.members()[host.rank()];
  RETURN_IF_ERROR(WaitReady(comm,
                            Watchdog(timeout_seconds, me, "NCCL init", host.axis(), others,
                                     [comm] { ncclCommAbort(comm); }),
                            "ncclCommInitRankConfig"));

  void* scratch = nullptr;
  cudaError_t e = cudaMalloc(&scratch, sizeof(int32_t));
  if (e != cudaSuccess) {
    ncclCommDestroy(comm);
    return absl::InternalError(absl::StrCat("cudaMalloc: ", cudaGetErrorString(e)));
  }
  cudaStream_t side = nullptr;
  e = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    ncclCommDestroy(comm);
    cudaFree(scratch);
    return absl::InternalError(absl::StrCat("cudaStreamCreate: ", cudaGetErrorString(e)));
  }
  return std::make_unique<NcclCommunicator>(host.axis(), host.members(), host.rank(), comm, stream,
                                            side, static_cast<int32_t*>(scratch), timeout_seconds);
}

}  // namespace ladder
