// Multi-rank test of the MPI communicators, run by meson under mpirun:
//   comm_mpi_test --dp D --tp T --pp P
// checks every operation on every axis of the grid against values computed by
// hand from world ranks, that all-reduce results are bitwise identical on
// every member and across repeats (started or blocking), and that stats count
// calls and bytes.
// Prints one line per failed check and exits 1 if any rank failed.
//
// The watchdog mode
//   comm_mpi_test --dp D --tp T --pp P --timeout S --skip-allreduce-rank R
// makes rank R skip a data-axis all-reduce (it sleeps instead), so its data
// peers time out after S seconds and abort the job (watchdog_test.sh checks
// the exit code and the line).
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {
namespace {

int g_failures = 0;

void Fail(const Communicator& c, const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d: %s axis: %s\n", MpiRuntime::world_rank(), AxisName(c.axis()),
               what.c_str());
}

bool Ok(const Communicator& c, const char* op, const absl::Status& s) {
  if (s.ok()) return true;
  Fail(c, absl::StrCat(op, " failed: ", s.ToString()));
  return false;
}

// Compares got with want element by element; reports the first difference.
template <typename T>
void Expect(const Communicator& c, const char* check, const std::vector<T>& got,
            const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      Fail(c, absl::StrCat(check, ": element ", i, " is ", got[i], ", expected ", want[i]));
      return;
    }
  }
}

// Small integers (exact in f32 whatever the summation order).
float Pattern(int world_rank, int64_t i) {
  return static_cast<float>((world_rank + 1) * (i % 97 + 1));
}

void CheckAllReduce(Communicator& c) {
  const std::vector<int>& m = c.members();
  const int me = m[c.rank()];
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
    std::vector<float> buf(n), sum(n, 0.0f), max(n, -FLT_MAX);
    for (int64_t i = 0; i < n; ++i) {
      buf[i] = Pattern(me, i);
      for (int w : m) {
        sum[i] += Pattern(w, i);
        max[i] = std::max(max[i], Pattern(w, i) * (w % 2 ? -1.0f : 1.0f));
      }
    }
    std::vector<float> b = buf;
    if (Ok(c, "AllReduce sum",
           c.AllReduce(Tensor::F32(b.data(), {n}, Device::kCpu), ReduceOp::kSum))) {
      Expect(c, "AllReduce sum f32", b, sum);
    }
    for (int64_t i = 0; i < n; ++i) b[i] = buf[i] * (me % 2 ? -1.0f : 1.0f);
    if (Ok(c, "AllReduce max",
           c.AllReduce(Tensor::F32(b.data(), {n}, Device::kCpu), ReduceOp::kMax))) {
      Expect(c, "AllReduce max f32", b, max);
    }
  }
  // bf16 reduces in fp32 and rounds each step's result: small integers whose
  // every partial sum stays exact in bf16 (at most 256) give the exact sum
  // and max in any order.
  for (int64_t n : {int64_t{1}, int64_t{1001}}) {
    std::vector<bf16> b16(n), b16max(n);
    std::vector<float> want_sum(n, 0.0f), want_max(n, -FLT_MAX);
    auto small = [](int w, int64_t i) { return static_cast<float>((w + 1) * (i % 4 + 1)); };
    for (int64_t i = 0; i < n; ++i) {
      b16[i] = FloatToBf16(small(me, i));
      b16max[i] = FloatToBf16(small(me, i) * (me % 2 ? -1.0f : 1.0f));
      for (int w : m) {
        want_sum[i] += small(w, i);
        want_max[i] = std::max(want_max[i], small(w, i) * (w % 2 ? -1.0f : 1.0f));
      }
    }
    for (auto [buf, op, want, name] :
         {std::tuple{&b16, ReduceOp::kSum, &want_sum, "AllReduce sum bf16"},
          std::tuple{&b16max, ReduceOp::kMax, &want_max, "AllReduce max bf16"}}) {
      if (!Ok(c, name, c.AllReduce(Tensor::BF16(buf->data(), {n}, Device::kCpu), op))) continue;
      std::vector<float> got(n);
      for (int64_t i = 0; i < n; ++i) got[i] = Bf16ToFloat((*buf)[i]);
      Expect(c, name, got, *want);
    }
  }
  std::vector<int32_t> v = {me, -me, 7}, want = {0, 0, 7 * c.size()};
  for (int w : m) want[0] += w, want[1] -= w;
  if (Ok(c, "AllReduce i32",
         c.AllReduce(Tensor::I32(v.data(), {3}, Device::kCpu), ReduceOp::kSum))) {
    Expect(c, "AllReduce sum i32", v, want);
  }
}

// Random floats summed in a group: every member must hold the same bits, and
// repeating the call on the same inputs must give them again.
void CheckBitwiseIdentical(Communicator& c) {
  const int me = c.members()[c.rank()];
  for (int64_t n : {int64_t{7}, int64_t{4096}, int64_t{300001}}) {
    std::vector<float> in(n);
    FillNormal(in.data(), 0, n, /*seed=*/me + 1, /*stream=*/0, 0.0f, 1.0f);
    std::vector<float> first = in, again = in;
    if (!Ok(c, "AllReduce",
            c.AllReduce(Tensor::F32(first.data(), {n}, Device::kCpu), ReduceOp::kSum)) ||
        !Ok(c, "AllReduce",
            c.AllReduce(Tensor::F32(again.data(), {n}, Device::kCpu), ReduceOp::kSum))) {
      return;
    }
    if (std::memcmp(first.data(), again.data(), n * sizeof(float)) != 0) {
      Fail(c, absl::StrCat("AllReduce of ", n, " floats differs between two identical calls"));
    }
    std::vector<float> root = first;
    if (!Ok(c, "Broadcast", c.Broadcast(Tensor::F32(root.data(), {n}, Device::kCpu), 0))) return;
    if (std::memcmp(first.data(), root.data(), n * sizeof(float)) != 0) {
      Fail(c, absl::StrCat("AllReduce of ", n, " floats differs from group rank 0's bits"));
    }
  }
}

// StartAllReduce: three buffers in flight at once, tested until complete
// (nothing else may use the group meanwhile), hold AllReduce's bits; stats
// count each call once, with its payload.
void CheckStartedAllReduce(Communicator& c) {
  const int me = c.members()[c.rank()];
  const std::vector<int64_t> sizes = {5, 4096, 100003};
  std::vector<std::vector<float>> started, blocking;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> in(sizes[i]);
    FillNormal(in.data(), 0, sizes[i], /*seed=*/me + 7, /*stream=*/i, 0.0f, 1.0f);
    started.push_back(in);
    blocking.push_back(in);
  }
  const CommStats before = c.stats();
  std::vector<std::unique_ptr<PendingOp>> pending;
  int64_t bytes = 0;
  for (std::vector<float>& b : started) {
    auto op = c.StartAllReduce(
        Tensor::F32(b.data(), {static_cast<int64_t>(b.size())}, Device::kCpu), ReduceOp::kSum);
    if (!Ok(c, "StartAllReduce", op.status())) return;
    pending.push_back(*std::move(op));
    bytes += static_cast<int64_t>(b.size() * sizeof(float));
  }
  // The first by polling (as the backward does), the rest by waiting.
  for (;;) {
    absl::StatusOr<bool> done = pending[0]->Test();
    if (!Ok(c, "PendingOp::Test", done.status()) || *done) break;
  }
  for (auto& op : pending) {
    if (!Ok(c, "PendingOp::Wait", op->Wait())) return;
  }
  if (c.size() > 1 &&
      (c.stats().calls - before.calls != 3 || c.stats().bytes - before.bytes != bytes)) {
    Fail(c,
         absl::StrCat("started all-reduces counted ", c.stats().calls - before.calls, " calls and ",
                      c.stats().bytes - before.bytes, " bytes, expected 3 and ", bytes));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!Ok(c, "AllReduce",
            c.AllReduce(Tensor::F32(blocking[i].data(), {sizes[i]}, Device::kCpu),
                        ReduceOp::kSum))) {
      return;
    }
    if (std::memcmp(started[i].data(), blocking[i].data(), sizes[i] * sizeof(float)) != 0) {
      Fail(c, absl::StrCat("StartAllReduce of ", sizes[i], " floats differs from AllReduce"));
    }
  }
}

void CheckReduceScatter(Communicator& c) {
  const std::vector<int>& m = c.members();
  const int64_t block = 1001;
  const int64_t n = block * c.size();
  std::vector<float> in(n), out(block), want(block, 0.0f);
  for (int64_t i = 0; i < n; ++i) in[i] = Pattern(m[c.rank()], i);
  for (int64_t i = 0; i < block; ++i) {
    for (int w : m) want[i] += Pattern(w, c.rank() * block + i);
  }
  if (Ok(c, "ReduceScatter",
         c.ReduceScatter(Tensor::F32(in.data(), {n}, Device::kCpu),
                         Tensor::F32(out.data(), {block}, Device::kCpu)))) {
    Expect(c, "ReduceScatter", out, want);
  }
  // A wrong shape is refused on the rank that made it, before anything is sent.
  absl::Status bad = c.ReduceScatter(Tensor::F32(in.data(), {n}, Device::kCpu),
                                     Tensor::F32(out.data(), {block - 1}, Device::kCpu));
  if (bad.code() != absl::StatusCode::kInvalidArgument) {
    Fail(c, absl::StrCat("ReduceScatter with a wrong block size returned ", bad.ToString()));
  }
}

void CheckAllGather(Communicator& c) {
  const std::vector<int>& m = c.members();
  const int64_t block = 513;
  const int64_t n = block * c.size();
  std::vector<int32_t> in(block), out(n), want(n);
  for (int64_t i = 0; i < block; ++i) in[i] = m[c.rank()] * 100000 + static_cast<int32_t>(i);
  for (int r = 0; r < c.size(); ++r) {
    for (int64_t i = 0; i < block; ++i)
      want[r * block + i] = m[r] * 100000 + static_cast<int32_t>(i);
  }
  if (Ok(c, "AllGather",
         c.AllGather(Tensor::I32(in.data(), {block}, Device::kCpu),
                     Tensor::I32(out.data(), {n}, Device::kCpu)))) {
    Expect(c, "AllGather i32", out, want);
  }
  // In place: this rank's block already sits in out (ZeRO-1's parameter shard).
  std::vector<int32_t> whole(n, -1);
  std::copy(in.begin(), in.end(), whole.begin() + c.rank() * block);
  if (Ok(c, "AllGather in place",
         c.AllGather(Tensor::I32(whole.data() + c.rank() * block, {block}, Device::kCpu),
                     Tensor::I32(whole.data(), {n}, Device::kCpu)))) {
    Expect(c, "AllGather in place", whole, want);
  }
  // bf16 is moved as 16-bit words.
  std::vector<uint16_t> h(2, static_cast<uint16_t>(m[c.rank()])), hout(2 * c.size());
  std::vector<uint16_t> hwant;
  for (int w : m) hwant.insert(hwant.end(), 2, static_cast<uint16_t>(w));
  if (Ok(c, "AllGather bf16",
         c.AllGather(Tensor(h.data(), DType::kBF16, {2}, Device::kCpu),
                     Tensor(hout.data(), DType::kBF16, {2 * c.size()}, Device::kCpu)))) {
    Expect(c, "AllGather bf16", hout, hwant);
  }
}

void CheckBroadcast(Communicator& c) {
  const std::vector<int>& m = c.members();
  for (int root = 0; root < c.size(); ++root) {
    std::vector<float> buf(257), want(257);
    for (int64_t i = 0; i < 257; ++i) {
      buf[i] = Pattern(m[c.rank()], i);
      want[i] = Pattern(m[root], i);
    }
    if (Ok(c, "Broadcast", c.Broadcast(Tensor::F32(buf.data(), {257}, Device::kCpu), root))) {
      Expect(c, absl::StrCat("Broadcast from root ", root).c_str(), buf, want);
    }
  }
}

// Pipeline traffic: activations to the next stage, gradients back.
// Started sends and receives: every rank starts a rendezvous-sized send to
// the next rank of a ring BEFORE it receives (blocking sends would
// deadlock), the receive from the previous rank started, and the send also
// matched by a blocking Recv on the other side in a second round; the data
// arrives intact, stats() counts each when it completes, and a receive of
// the wrong size fails.
void CheckStartedSendRecv(Communicator& c) {
  if (!c.StartsPointToPoint()) {
    Fail(c, "an MPI group does not start point-to-point transfers");
    return;
  }
  const std::vector<int>& m = c.members();
  const int r = c.rank(), next = (r + 1) % c.size(), prev = (r + c.size() - 1) % c.size();
  const int64_t n = 20000;
  auto message = [&](int from, int64_t salt) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Pattern(m[from], i + salt);
    return v;
  };
  std::vector<float> out = message(r, 21), in(n);
  const CommStats before = c.stats();
  auto send = c.StartSend(Tensor::F32(out.data(), {n}, Device::kCpu), next);
  if (!Ok(c, "StartSend", send.status())) return;
  auto recv = c.StartRecv(Tensor::F32(in.data(), {n}, Device::kCpu), prev);
  if (!Ok(c, "StartRecv", recv.status())) return;
  for (;;) {  // the receive by polling, the send by waiting
    absl::StatusOr<bool> done = (*recv)->Test();
    if (!Ok(c, "PendingOp::Test", done.status()) || *done) break;
  }
  if (!Ok(c, "PendingOp::Wait", (*send)->Wait())) return;
  Expect(c, "started ring shift", in, message(prev, 21));
  if (c.stats().calls - before.calls != 2 || c.stats().bytes - before.bytes != 8 * n) {
    Fail(c, absl::StrCat("started send and receive counted ", c.stats().calls - before.calls,
                         " calls and ", c.stats().bytes - before.bytes, " bytes, expected 2 and ",
                         8 * n));
  }
  // Even ranks start their send, odd ones receive it blocking, and back.
  if (c.size() % 2 == 0) {
    std::vector<float> msg = message(r, 33);
    const int peer = r % 2 == 0 ? r + 1 : r - 1;
    if (r % 2 == 0) {
      auto op = c.StartSend(Tensor::F32(msg.data(), {n}, Device::kCpu), peer);
      if (Ok(c, "StartSend", op.status())) Ok(c, "PendingOp::Wait", (*op)->Wait());
    } else if (Ok(c, "Recv", c.Recv(Tensor::F32(in.data(), {n}, Device::kCpu), peer))) {
      Expect(c, "a started send received by Recv", in, message(peer, 33));
    }
  }
  // A started receive of fewer elements than were sent fails.
  std::vector<float> small(n - 1);
  auto bad_send = c.StartSend(Tensor::F32(out.data(), {n}, Device::kCpu), next);
  auto bad_recv = c.StartRecv(Tensor::F32(small.data(), {n - 1}, Device::kCpu), prev);
  if (bad_send.ok() && bad_recv.ok()) {
    const absl::Status got = (*bad_recv)->Wait();
    if (got.ok()) Fail(c, "a started receive of the wrong size succeeded");
    (*bad_send)->Wait().IgnoreError();
  } else {
    Fail(c, "starting the wrong-size transfer failed early");
  }
}

void CheckSendRecv(Communicator& c) {
  const std::vector<int>& m = c.members();
  const int r = c.rank();
  const int64_t n = 20000;  // past the eager limit: a rendezvous transfer
  auto message = [&](int from, int64_t salt) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Pattern(m[from], i + salt);
    return v;
  };
  std::vector<float> buf(n);
  if (r > 0 && Ok(c, "Recv", c.Recv(Tensor::F32(buf.data(), {n}, Device::kCpu), r - 1))) {
    Expect(c, "Recv from the previous stage", buf, message(r - 1, 0));
  }
  if (r + 1 < c.size()) {
    std::vector<float> out = message(r, 0);
    Ok(c, "Send", c.Send(Tensor::F32(out.data(), {n}, Device::kCpu), r + 1));
    if (Ok(c, "Recv", c.Recv(Tensor::F32(buf.data(), {n}, Device::kCpu), r + 1))) {
      Expect(c, "Recv from the next stage", buf, message(r + 1, 5));
    }
  }
  if (r > 0) {
    std::vector<float> back = message(r, 5);
    Ok(c, "Send", c.Send(Tensor::F32(back.data(), {n}, Device::kCpu), r - 1));
  }
  if (c.Send(Tensor::F32(buf.data(), {n}, Device::kCpu), r).code() !=
      absl::StatusCode::kInvalidArgument) {
    Fail(c, "Send to itself was not refused");
  }
  // Every rank sends to the next and receives from the previous at once (a
  // ring shift): with a blocking Send on every rank, rendezvous-sized
  // messages would deadlock; SendRecv must not.
  const int next = (r + 1) % c.size(), prev = (r + c.size() - 1) % c.size();
  std::vector<float> out = message(r, 9);
  if (Ok(c, "SendRecv",
         c.SendRecv(Tensor::F32(out.data(), {n}, Device::kCpu), next,
                    Tensor::F32(buf.data(), {n}, Device::kCpu), prev))) {
    Expect(c, "SendRecv ring shift", buf, message(prev, 9));
  }
  if (c.SendRecv(Tensor::F32(out.data(), {n}, Device::kCpu), next,
                 Tensor::F32(out.data() + 1, {n - 1}, Device::kCpu), prev)
          .code() != absl::StatusCode::kInvalidArgument) {
    Fail(c, "SendRecv with overlapping buffers was not refused");
  }
}

// Buffers past MPI's int count travel as one element of a derived type
// (mpi_comm.h). With the limit lowered to 1000 elements: broadcasts and a
// ring shift of 2500 floats (two blocks and a rest) and 3000 bytes (three
// blocks, no rest) arrive whole; a reduction that large is refused.
void CheckLargeMessages(Communicator& c) {
  SetMpiMaxCountForTesting(1000);
  const std::vector<int>& m = c.members();
  const int r = c.rank();
  for (int64_t n : {int64_t{2500}, int64_t{3000}}) {
    for (int root = 0; root < c.size(); ++root) {
      std::vector<float> buf(n), want(n);
      for (int64_t i = 0; i < n; ++i) {
        buf[i] = Pattern(m[r], i);
        want[i] = Pattern(m[root], i);
      }
      if (Ok(c, "Broadcast", c.Broadcast(Tensor::F32(buf.data(), {n}, Device::kCpu), root))) {
        Expect(c, absl::StrCat("Broadcast of ", n, " from root ", root).c_str(), buf, want);
      }
    }
    if (c.size() > 1) {
      const int next = (r + 1) % c.size(), prev = (r + c.size() - 1) % c.size();
      std::vector<int8_t> out(n), in(n, 0), want(n);
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<int8_t>((m[r] * 31 + i) % 127);
        want[i] = static_cast<int8_t>((m[prev] * 31 + i) % 127);
      }
      if (Ok(c, "SendRecv",
             c.SendRecv(Tensor(out.data(), DType::kI8, {n}, Device::kCpu), next,
                        Tensor(in.data(), DType::kI8, {n}, Device::kCpu), prev))) {
        Expect(c, absl::StrCat("SendRecv ring shift of ", n, " bytes").c_str(), in, want);
      }
    }
  }
  std::vector<float> big(2500, 1.0f);
  if (c.size() > 1 &&
      c.AllReduce(Tensor::F32(big.data(), {2500}, Device::kCpu), ReduceOp::kSum).code() !=
          absl::StatusCode::kInvalidArgument) {
    Fail(c, "an all-reduce past the count limit was not refused");
  }
  SetMpiMaxCountForTesting(INT_MAX);
}

// One call of each collective, then compare the counters with the sizes
// passed (comm.h defines bytes as the full buffer of each call).
void CheckStats(Communicator& c) {
  c.ResetStats();
  const int64_t n = 64;
  std::vector<float> a(n * c.size(), 1.0f), b(n);
  bool ok =
      Ok(c, "AllReduce", c.AllReduce(Tensor::F32(a.data(), {n}, Device::kCpu), ReduceOp::kSum)) &&
      Ok(c, "ReduceScatter",
         c.ReduceScatter(Tensor::F32(a.data(), {n * c.size()}, Device::kCpu),
                         Tensor::F32(b.data(), {n}, Device::kCpu))) &&
      Ok(c, "AllGather",
         c.AllGather(Tensor::F32(b.data(), {n}, Device::kCpu),
                     Tensor::F32(a.data(), {n * c.size()}, Device::kCpu))) &&
      Ok(c, "Broadcast", c.Broadcast(Tensor::F32(b.data(), {n}, Device::kCpu), 0)) &&
      Ok(c, "Barrier", c.Barrier());
  if (!ok) return;
  const bool alone = c.size() == 1;
  const int64_t calls = alone ? 0 : 5;
  const int64_t bytes = alone ? 0 : 4 * (n + 2 * n * c.size() + n);
  if (c.stats().calls != calls || c.stats().bytes != bytes || (!alone && c.stats().seconds <= 0)) {
    Fail(c, absl::StrCat("stats: ", c.stats().calls, " calls, ", c.stats().bytes, " bytes, ",
                         c.stats().seconds, " s; expected ", calls, " calls, ", bytes, " bytes"));
  }
}

absl::Status Run(GridShape shape, double timeout, int skip_rank) {
  ASSIGN_OR_RETURN(Grid grid,
                   Grid::Create(shape, MpiRuntime::world_size(), MpiRuntime::world_rank()));
  ASSIGN_OR_RETURN(Communicators comms, CreateHostCommunicators(grid, timeout));

  if (skip_rank >= 0) {
    if (grid.rank() == skip_rank) {
      std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins
    } else {
      std::vector<float> x(16, 1.0f);
      RETURN_IF_ERROR(
          comms[Axis::kData].AllReduce(Tensor::F32(x.data(), {16}, Device::kCpu), ReduceOp::kSum));
      std::this_thread::sleep_for(std::chrono::seconds(60));  // until the abort
    }
    return absl::InternalError("the watchdog did not end the job");
  }

  for (Axis axis : kAllAxes) {
    Communicator& c = comms[axis];
    const std::vector<int> want = grid.Members(axis);
    if (c.members() != want || c.rank() != grid.GroupRank(axis) || c.axis() != axis) {
      Fail(c, absl::StrCat("members {", absl::StrJoin(c.members(), ","), "}, expected {",
                           absl::StrJoin(want, ","), "}"));
    }
    CheckAllReduce(c);
    CheckBitwiseIdentical(c);
    CheckStartedAllReduce(c);
    CheckReduceScatter(c);
    CheckAllGather(c);
    CheckBroadcast(c);
    if (c.size() > 1) CheckSendRecv(c);
    if (c.size() > 1) CheckStartedSendRecv(c);
    CheckLargeMessages(c);
    RETURN_IF_ERROR(c.Barrier());
    CheckStats(c);
  }

  // Every rank learns whether any rank failed.
  int32_t failures = g_failures;
  RETURN_IF_ERROR(
      comms[Axis::kWorld].AllReduce(Tensor::I32(&failures, {1}, Device::kCpu), ReduceOp::kSum));
  if (grid.rank() == 0) {
    std::printf("comm_mpi_test: %d ranks as dp %d x tp %d x pp %d: %s\n", grid.world_size(),
                shape.dp, shape.tp, shape.pp,
                failures == 0 ? "all checks passed" : absl::StrCat(failures, " failures").c_str());
  }
  return failures == 0 ? absl::OkStatus() : absl::InternalError("checks failed");
}

}  // namespace
}  // namespace ladder

int main(int argc, char** argv) {
  using ladder::MpiRuntime;
  if (absl::Status s = MpiRuntime::Init(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "comm_mpi_test: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  ladder::GridShape shape;
  double timeout = 60;
  int skip_rank = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--dp")
      shape.dp = value;
    else if (flag == "--tp")
      shape.tp = value;
    else if (flag == "--pp")
      shape.pp = value;
    else if (flag == "--timeout")
      timeout = std::atof(argv[i + 1]);
    else if (flag == "--skip-allreduce-rank")
      skip_rank = value;
    else {
      std::fprintf(stderr, "comm_mpi_test: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  absl::Status s = ladder::Run(shape, timeout, skip_rank);
  if (!s.ok()) {
    std::fprintf(stderr, "comm_mpi_test: rank %d: %s\n", MpiRuntime::world_rank(),
                 std::string(s.message()).c_str());
  }
  MpiRuntime::Finalize();
  return s.ok() ? 0 : 1;
}
