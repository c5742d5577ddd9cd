// MPI runtime and communicator: non-blocking MPI calls completed by a watched
// polling loop (see mpi_comm.h for why).
#include "src/parallel/mpi_comm.h"

// The C API only: Open MPI's deprecated C++ bindings warn under -Wextra.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "src/core/bf16.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/parallel/self_comm.h"
#include "src/parallel/watchdog.h"

namespace ladder {
namespace {

// Runtime state; written once by MpiRuntime::Init.
bool g_initialized = false;
bool g_active = false;
int g_world_size = 1;
int g_world_rank = 0;

absl::Status MpiError(int code, absl::string_view op) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(op, ": ", absl::string_view(text, len)));
}

// Completes `req`, polling under the watchdog.
absl::Status Wait(MPI_Request* req, MPI_Status* status, const char* op, Watchdog dog) {
  for (;;) {
    int done = 0;
    int rc = MPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS) return MpiError(rc, op);
    if (done) return absl::OkStatus();
    dog.Pause();
  }
}

MPI_Datatype MpiType(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kBF16:
      return MPI_UINT16_T;  // reduced by the operations of Bf16Op
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI8:
      return MPI_INT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI has no bf16 type: bf16 travels as 16-bit integers, and sums and
// maxima go through user operations that widen each pair, combine in fp32
// and round back to nearest even (src/core/bf16.h), as NCCL's bf16 does.
template <bool kMax>
void CombineBf16(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Bf16ToFloat(a[i]), y = Bf16ToFloat(b[i]);
    b[i] = FloatToBf16(kMax ? std::max(x, y) : x + y);
  }
}

// The MPI operation for `op` on `dtype`: built-in, or (bf16) a user
// operation created on first use, after MPI_Init, and kept for the run.
MPI_Op MpiOp(ReduceOp op, DType dtype) {
  if (dtype != DType::kBF16) return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  static const std::pair<MPI_Op, MPI_Op> ops = [] {
    std::pair<MPI_Op, MPI_Op> p;
    MPI_Op_create(&CombineBf16<false>, /*commute=*/1, &p.first);
    MPI_Op_create(&CombineBf16<true>, /*commute=*/1, &p.second);
    return p;
  }();
  return op == ReduceOp::kSum ? ops.first : ops.second;
}

// Elements one call names at most: MPI's int count (lowered by tests).
int64_t g_max_count = INT_MAX;

// A buffer as a point-to-point or broadcast call names it: `count()`
// elements of `type()`. Up to g_max_count elements that is the tensor's own
// type. Past it an int count cannot say the size (a 124M-parameter shard is
// 1.5e9 bytes, a 1.5B one's 1.8e10), so the buffer becomes one element of a
// derived type built here, q blocks of g_max_count elements and then the r
// left over: one message still, matched element for element by a receiver
// of the same size. Reductions keep the limit (MPI's built-in operations
// take built-in types). Lives until the call that uses it has completed.
class MpiBuffer {
 public:
  explicit MpiBuffer(const Tensor& t) : type_(MpiType(t.dtype)) {
    const int64_t n = t.numel();
    if (n <= g_max_count) {
      count_ = static_cast<int>(n);
      return;
    }
    const int64_t q = n / g_max_count, r = n % g_max_count;
    MPI_Datatype block = MPI_DATATYPE_NULL, blocks = MPI_DATATYPE_NULL;
    Check(MPI_Type_contiguous(static_cast<int>(g_max_count), type_, &block));
    Check(MPI_Type_contiguous(static_cast<int>(q), block, &blocks));
    if (r == 0) {
      derived_ = blocks;
    } else {
      int lengths[2] = {1, static_cast<int>(r)};
      MPI_Aint offsets[2] = {0, static_cast<MPI_Aint>(q * g_max_count * DTypeSize(t.dtype))};
      MPI_Datatype types[2] = {blocks, type_};
      Check(MPI_Type_create_struct(2, lengths, offsets, types, &derived_));
      if (blocks != MPI_DATATYPE_NULL) MPI_Type_free(&blocks);
    }
    if (block != MPI_DATATYPE_NULL) MPI_Type_free(&block);
    if (derived_ != MPI_DATATYPE_NULL) Check(MPI_Type_commit(&derived_));
    type_ = derived_;
    count_ = 1;
  }
  ~MpiBuffer() {
    if (derived_ != MPI_DATATYPE_NULL) MPI_Type_free(&derived_);
  }
  MpiBuffer(const MpiBuffer&) = delete;
  MpiBuffer& operator=(const MpiBuffer&) = delete;

  // An MPI error from building the type, naming the call `op`.
  absl::Status status(const char* op) const {
    return rc_ == MPI_SUCCESS ? absl::OkStatus() : MpiError(rc_, op);
  }
  int count() const { return count_; }
  MPI_Datatype type() const { return type_; }

 private:
  void Check(int rc) {
    if (rc_ == MPI_SUCCESS) rc_ = rc;
  }

  MPI_Datatype type_;
  MPI_Datatype derived_ = MPI_DATATYPE_NULL;
  int count_ = 0;
  int rc_ = MPI_SUCCESS;
};

bool Overlap(const Tensor& a, const Tensor& b) {
  auto* a0 = static_cast<const char*>(a.data);
  auto* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Axis axis, std::vector<int> members, int rank, MPI_Comm comm, double timeout,
                  Device device)
      : Communicator(axis, std::move(members), rank),
        comm_(comm),
        timeout_(timeout),
        device_(device) {
    for (int i = 0; i < size(); ++i) {
      if (i != rank) others_.push_back(this->members()[i]);
    }
  }
  // MPI reads and writes host memory: buffers on the CPU, or on a device
  // whose memory is the host's (device_, the CUDA simulator's).
  Device Addressable(const Tensor& t) const { return t.device == device_ ? device_ : Device::kCpu; }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  absl::Status AllReduce(Tensor buf, ReduceOp op) override {
    ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> pending, StartAllReduce(buf, op));
    return pending->Wait();
  }

  absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp op) override {
    RETURN_IF_ERROR(CheckBuffer("AllReduce", "buf", buf, Addressable(buf)));
    RETURN_IF_ERROR(CheckReducible("AllReduce", buf));
    RETURN_IF_ERROR(CheckCount("AllReduce", buf));
    auto pending = std::make_unique<Pending>(this, "all-reduce", static_cast<int64_t>(buf.bytes()));
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.numel()),
                            MpiType(buf.dtype), MpiOp(op, buf.dtype), comm_, &pending->req);
    if (rc != MPI_SUCCESS) return pending->Fail(MpiError(rc, "all-reduce"));
    return pending;
  }

  absl::Status ReduceScatter(Tensor in, Tensor out) override {
    RETURN_IF_ERROR(CheckBuffer("ReduceScatter", "in", in, Addressable(in)));
    RETURN_IF_ERROR(CheckBuffer("ReduceScatter", "out", out, Addressable(out)));
    RETURN_IF_ERROR(CheckReducible("ReduceScatter", in));
    RETURN_IF_ERROR(CheckBlocks("ReduceScatter", in, out));
    RETURN_IF_ERROR(CheckCount("ReduceScatter", out));
    if (Overlap(in, out)) {
      return absl::InvalidArgumentError("ReduceScatter: in and out overlap");
    }
    Timer timer;
    MPI_Request req;
    int rc =
        MPI_Ireduce_scatter_block(in.data, out.data, static_cast<int>(out.numel()),
                                  MpiType(in.dtype), MpiOp(ReduceOp::kSum, in.dtype), comm_, &req);
    return Finish(rc, &req, "reduce-scatter", others_, timer, in.bytes());
  }

  absl::Status AllGather(Tensor in, Tensor out) override {
    RETURN_IF_ERROR(CheckBuffer("AllGather", "in", in, Addressable(in)));
    RETURN_IF_ERROR(CheckBuffer("AllGather", "out", out, Addressable(out)));
    RETURN_IF_ERROR(CheckBlocks("AllGather", out, in));
    RETURN_IF_ERROR(CheckCount("AllGather", in));
    const void* send = in.data;
    if (in.data == static_cast<char*>(out.data) + rank() * in.bytes()) {
      send = MPI_IN_PLACE;
    } else if (Overlap(in, out)) {
      return absl::InvalidArgumentError(
          "AllGather: in overlaps out without being this rank's block of it");
    }
    Timer timer;
    MPI_Request req;
    int rc = MPI_Iallgather(send, static_cast<int>(in.numel()), MpiType(in.dtype), out.data,
                            static_cast<int>(in.numel()), MpiType(in.dtype), comm_, &req);
    return Finish(rc, &req, "all-gather", others_, timer, out.bytes());
  }

  absl::Status Broadcast(Tensor buf, int root) override {
    RETURN_IF_ERROR(CheckBuffer("Broadcast", "buf", buf, Addressable(buf)));
    RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    const MpiBuffer b(buf);
    RETURN_IF_ERROR(b.status("broadcast"));
    Timer timer;
    MPI_Request req;
    int rc = MPI_Ibcast(buf.data, b.count(), b.type(), root, comm_, &req);
    // A receiver waits for the root; the root for everyone.
    std::vector<int> waiting_for = rank() == root ? others_ : std::vector<int>{members()[root]};
    return Finish(rc, &req, "broadcast", waiting_for, timer, buf.bytes());
  }

  absl::Status Send(Tensor buf, int peer) override {
    RETURN_IF_ERROR(CheckBuffer("Send", "buf", buf, Addressable(buf)));
    RETURN_IF_ERROR(CheckPeer("Send", peer));
    const MpiBuffer b(buf);
    RETURN_IF_ERROR(b.status("send"));
    Timer timer;
    MPI_Request req;
    int rc = MPI_Isend(buf.data, b.count(), b.type(), peer, kTag, comm_, &req);
    return Finish(rc, &req, "send", {members()[peer]}, timer, buf.bytes());
  }

  absl::Status Recv(Tensor buf, int peer) override {
    RETURN_IF_ERROR(CheckBuffer("Recv", "buf", buf, Addressable(buf)));
    RETURN_IF_ERROR(CheckPeer("Recv", peer));
    const MpiBuffer b(buf);
    RETURN_IF_ERROR(b.status("recv"));
    Timer timer;
    MPI_Request req;
    int rc = MPI_Irecv(buf.data, b.count(), b.type(), peer, kTag, comm_, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "recv");
    MPI_Status status;
    RETURN_IF_ERROR(Wait(&req, &status, "recv", Dog("recv", {members()[peer]})));
    RETURN_IF_ERROR(CheckReceived("recv", status, buf, peer));
    Record("recv", timer, static_cast<int64_t>(buf.bytes()));
    return absl::OkStatus();
  }

  bool StartsPointToPoint() const override { return true; }

  absl::StatusOr<std::unique_ptr<PendingOp>> StartSend(Tensor buf, int peer) override {
    return StartPointToPoint(/*send=*/true, buf, peer);
  }

  absl::StatusOr<std::unique_ptr<PendingOp>> StartRecv(Tensor buf, int peer) override {
    return StartPointToPoint(/*send=*/false, buf, peer);
  }

  absl::Status SendRecv(Tensor send, int send_peer, Tensor recv, int recv_peer) override {
    RETURN_IF_ERROR(CheckBuffer("SendRecv", "send", send, Addressable(send)));
    RETURN_IF_ERROR(CheckBuffer("SendRecv", "recv", recv, Addressable(recv)));
    RETURN_IF_ERROR(CheckPeer("SendRecv", send_peer));
    RETURN_IF_ERROR(CheckPeer("SendRecv", recv_peer));
    if (Overlap(send, recv)) return absl::InvalidArgumentError("SendRecv: send and recv overlap");
    const MpiBuffer s(send), r(recv);
    RETURN_IF_ERROR(s.status("send-recv"));
    RETURN_IF_ERROR(r.status("send-recv"));
    Timer timer;
    MPI_Request reqs[2];
    int rc = MPI_Irecv(recv.data, r.count(), r.type(), recv_peer, kTag, comm_, &reqs[0]);
    if (rc != MPI_SUCCESS) return MpiError(rc, "send-recv");
    rc = MPI_Isend(send.data, s.count(), s.type(), send_peer, kTag, comm_, &reqs[1]);
    if (rc != MPI_SUCCESS) {
      MPI_Cancel(&reqs[0]);
      MPI_Request_free(&reqs[0]);
      return MpiError(rc, "send-recv");
    }
    std::vector<int> peers = {members()[recv_peer]};
    if (send_peer != recv_peer) peers.push_back(members()[send_peer]);
    MPI_Status status;
    RETURN_IF_ERROR(Wait(&reqs[0], &status, "send-recv", Dog("send-recv", peers)));
    RETURN_IF_ERROR(Wait(&reqs[1], MPI_STATUS_IGNORE, "send-recv", Dog("send-recv", peers)));
    RETURN_IF_ERROR(CheckReceived("send-recv", status, recv, recv_peer));
    Record("send-recv", timer, static_cast<int64_t>(send.bytes() + recv.bytes()));
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    Timer timer;
    MPI_Request req;
    int rc = MPI_Ibarrier(comm_, &req);
    return Finish(rc, &req, "barrier", others_, timer, 0);
  }

 private:
  static constexpr int kTag = 0;

  // MPI counts are ints; a reduction cannot go past them (MpiBuffer).
  absl::Status CheckCount(const char* op, const Tensor& t) const {
    if (t.numel() <= g_max_count) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", t.numel(),
                                                   " elements is more than MPI's limit of ",
                                                   g_max_count, " in one call; split the buffer"));
  }

  // A message must fill the receive buffer exactly (counted in the
  // tensor's elements, whatever type carried them).
  absl::Status CheckReceived(const char* op, const MPI_Status& status, const Tensor& buf,
                             int peer) const {
    MPI_Count received = 0;
    MPI_Get_elements_x(&status, MpiType(buf.dtype), &received);
    if (received == buf.numel()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(op, ": got ", received, " elements from world rank ",
                                            members()[peer], ", expected ", buf.numel()));
  }

  // Completes a call issued with return code `rc` and records it.
  absl::Status Finish(int rc, MPI_Request* req, const char* op, const std::vector<int>& waiting_for,
                      const Timer& timer, size_t bytes) {
    if (rc != MPI_SUCCESS) return MpiError(rc, op);
    RETURN_IF_ERROR(Wait(req, MPI_STATUS_IGNORE, op, Dog(op, waiting_for)));
    Record(op, timer, static_cast<int64_t>(bytes));
    return absl::OkStatus();
  }

  // MPI_Isend or MPI_Irecv of buf with `peer`, in flight in the returned op
  // (a receive checks the size of what arrived when it completes).
  absl::StatusOr<std::unique_ptr<PendingOp>> StartPointToPoint(bool send, Tensor buf, int peer) {
    const char* call = send ? "StartSend" : "StartRecv";
    const char* op = send ? "send" : "recv";
    RETURN_IF_ERROR(CheckBuffer(call, "buf", buf, Addressable(buf)));
    RETURN_IF_ERROR(CheckPeer(call, peer));
    const MpiBuffer b(buf);
    RETURN_IF_ERROR(b.status(op));
    auto pending = std::make_unique<Pending>(this, op, static_cast<int64_t>(buf.bytes()));
    pending->waiting_for = {members()[peer]};
    int rc;
    if (send) {
      rc = MPI_Isend(buf.data, b.count(), b.type(), peer, kTag, comm_, &pending->req);
    } else {
      pending->received = buf;
      pending->peer = peer;
      rc = MPI_Irecv(buf.data, b.count(), b.type(), peer, kTag, comm_, &pending->req);
    }
    if (rc != MPI_SUCCESS) return pending->Fail(MpiError(rc, op));
    return pending;
  }

  Watchdog Dog(const char* op, std::vector<int> waiting_for) const {
    return Watchdog(timeout_, members()[rank()], op, axis(), std::move(waiting_for));
  }

  // A started operation: its request, completed by MPI_Test (which also
  // advances libnbc's rounds) or by Wait under the watchdog, then recorded.
  // A receive also checks the size of what arrived.
  class Pending final : public PendingOp {
   public:
    Pending(MpiCommunicator* comm, const char* op, int64_t bytes)
        : waiting_for(comm->others_), comm_(comm), op_(op), bytes_(bytes) {}
    ~Pending() override { Wait().IgnoreError(); }
    absl::StatusOr<bool> Test() override {
      if (req == MPI_REQUEST_NULL || !error_.ok()) return Done();
      int done = 0;
      MPI_Status status;
      const int rc = MPI_Test(&req, &done, &status);
      if (rc != MPI_SUCCESS) error_ = MpiError(rc, op_);
      if (!done && error_.ok()) return false;
      if (error_.ok()) error_ = CheckArrived(status);
      return Done();
    }
    absl::Status Wait() override {
      if (req != MPI_REQUEST_NULL && error_.ok()) {
        MPI_Status status;
        error_ = ladder::Wait(&req, &status, op_, comm_->Dog(op_, waiting_for));
        if (error_.ok()) error_ = CheckArrived(status);
      }
      return Done().status();
    }

    // A start that failed: nothing in flight, nothing recorded.
    absl::Status Fail(absl::Status error) {
      req = MPI_REQUEST_NULL;
      error_ = error;
      return error;
    }

    MPI_Request req = MPI_REQUEST_NULL;
    // The world ranks a hang would be waiting for (the watchdog names them).
    std::vector<int> waiting_for;
    // A receive's buffer and sender (empty for other operations).
    Tensor received;
    int peer = -1;

   private:
    absl::Status CheckArrived(const MPI_Status& status) const {
      if (received.empty()) return absl::OkStatus();
      return comm_->CheckReceived(op_, status, received, peer);
    }

    // Records the call once, when first found complete.
    absl::StatusOr<bool> Done() {
      if (!error_.ok()) return error_;
      if (!recorded_) comm_->Record(op_, timer_, bytes_);
      recorded_ = true;
      return true;
    }

    MpiCommunicator* comm_;
    const char* op_;
    int64_t bytes_;
    Timer timer_;
    bool recorded_ = false;
    absl::Status error_;
  };

  MPI_Comm comm_;
  double timeout_;
  Device device_;
  std::vector<int> others_;  // world ranks of the other members
};

}  // namespace

void SetMpiMaxCountForTesting(int64_t max_count) { g_max_count = max_count; }

absl::Status MpiRuntime::Init(int* argc, char*** argv) {
  if (g_initialized) return absl::FailedPreconditionError("MpiRuntime::Init called twice");
  g_initialized = true;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                        std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (!launched) return absl::OkStatus();
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return absl::InternalError("MPI_Init_thread failed");
  g_active = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  if (provided < MPI_THREAD_FUNNELED) {
    return absl::InternalError("MPI does not provide MPI_THREAD_FUNNELED");
  }
  return absl::OkStatus();
}

bool MpiRuntime::active() { return g_active; }
int MpiRuntime::world_size() { return g_world_size; }
int MpiRuntime::world_rank() { return g_world_rank; }

void MpiRuntime::Finalize() {
  if (!g_active) return;
  g_active = false;
  MPI_Finalize();
}

void MpiRuntime::Abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_active) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(Axis axis,
                                                                    const std::vector<int>& members,
                                                                    double timeout_seconds,
                                                                    Device device) {
  const int me = MpiRuntime::world_rank();
  auto it = std::find(members.begin(), members.end(), me);
  if (it == members.end() || !std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() || members.front() < 0 ||
      members.back() >= MpiRuntime::world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", AxisName(axis), " group {", absl::StrJoin(members, ","),
                     "} is not an ascending list of world ranks containing rank ", me));
  }
  if (members.size() == 1) return std::make_unique<SelfCommunicator>(axis, me);
  if (!MpiRuntime::active()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", AxisName(axis), " group has ", members.size(),
                     " ranks but MPI is not running (launch with mpirun)"));
  }
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &group);
  MPI_Comm comm = MPI_COMM_NULL;
  // The tag keeps the creations of different axes apart.
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, static_cast<int>(axis), &comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_create_group");
  return std::make_unique<MpiCommunicator>(axis, members, static_cast<int>(it - members.begin()),
                                           comm, timeout_seconds, device);
}

absl::StatusOr<Communicators> CreateHostCommunicators(const Grid& grid, double timeout_seconds) {
  if (grid.world_size() != MpiRuntime::world_size() || grid.rank() != MpiRuntime::world_rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the grid is for rank ", grid.rank(), " of ", grid.world_size(),
        " but this process is rank ", MpiRuntime::world_rank(), " of ", MpiRuntime::world_size()));
  }
  if (grid.world_size() > 1) {
    std::vector<int> others;
    for (int r = 0; r < grid.world_size(); ++r) {
      if (r != grid.rank()) others.push_back(r);
    }
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "barrier");
    RETURN_IF_ERROR(Wait(&req, MPI_STATUS_IGNORE, "barrier",
                         Watchdog(timeout_seconds, grid.rank(), "barrier", Axis::kWorld, others)));
  }
  Communicators comms;
  for (Axis axis : kAllAxes) {
    ASSIGN_OR_RETURN(comms.by_axis[static_cast<int>(axis)],
                     CreateMpiCommunicator(axis, grid.Members(axis), timeout_seconds));
  }
  return comms;
}

}  // namespace ladder
