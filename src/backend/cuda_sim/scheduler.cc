// Launches: runs a grid block by block, each block's threads as fibers
// (fiber.h) in passes: every runnable thread, in index order, runs until it
// waits at a collective or exits, and hands over to the next. The warp
// collectives of device.h are resolved as soon as no lane of the warp can
// run, __syncthreads when no thread of the block can. Faults inside a kernel (a guard
// page, a wild pointer, a fiber's stack overflow, abort()) are caught by a
// signal handler that jumps back to the launch, which fails with the kernel's
// name and the faulting thread's indices.
#include <signal.h>
#include <sys/ucontext.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/cuda_sim/device.h"
#include "src/backend/cuda_sim/errors.h"
#include "src/backend/cuda_sim/fiber.h"
#include "src/backend/cuda_sim/memory.h"
#include "src/backend/cuda_sim/runtime.h"
#include "src/backend/cuda_sim/tensor_core.h"

namespace ladder {
namespace cuda_sim {
namespace internal {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxGridYZ = 65535;
constexpr size_t kDefaultShared = 48 * 1024;
constexpr size_t kMaxShared = 227 * 1024;

enum class Wait : uint8_t { kRunnable, kBarrier, kWarp, kDone };

// A cp.async copy waiting for its thread's cp.async.wait_group.
struct PendingCopy {
  void* dst;
  const void* src;
  int64_t group;  // -1 until cp.async.commit_group
};

// One simulated thread of the running block.
struct SimThread {
  FiberSp sp = nullptr;
  Wait wait = Wait::kRunnable;
  uint3 idx{0, 0, 0};
  // At a warp collective: what, with which mask, and the lane's operand.
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  int arg = 0;
  int width = 32;
  uint64_t value = 0;
  uint64_t result = 0;
  // At a tensor-core collective (WarpMatrix): the lane's operands and results.
  const void* in = nullptr;
  void* out = nullptr;
  // cp.async: copies issued and not yet completed, and the groups committed.
  std::vector<PendingCopy> copies;
  int64_t groups = 0;
};

// The launch running on this host thread.
struct Run {
  const LaunchRequest* request = nullptr;
  std::vector<SimThread> threads;
  std::vector<float4> shared;  // the block's dynamic shared memory (16-byte aligned)
  FiberStacks stacks;
  FiberSp scheduler_sp = nullptr;
  int current = -1;  // index of the running thread, -1 in the scheduler
  sigjmp_buf fault_jump;
  std::string failure;  // set when the block fails
  cudaError_t failure_code = cudaSuccess;
};

thread_local Run* run = nullptr;
// Per host thread, reused by its launches (fiber stacks are costly to map).
thread_local Run* run_storage = nullptr;

std::mutex attr_mu;
std::map<const void*, size_t>* max_shared = new std::map<const void*, size_t>;

std::string Dim(uint3 d) { return absl::StrCat("(", d.x, ",", d.y, ",", d.z, ")"); }
std::string Dim(dim3 d) { return absl::StrCat("(", d.x, ",", d.y, ",", d.z, ")"); }

// "kernel Foo<float, 4> block (3,0,0) thread (17,0,0)"
std::string Where(const Run& r, int t) {
  std::string s = absl::StrCat("kernel ", r.request->kernel_name, " block ", Dim(blockIdx));
  if (t >= 0) absl::StrAppend(&s, " thread ", Dim(r.threads[static_cast<size_t>(t)].idx));
  return s;
}

bool IsMatrixOp(WarpOp op) { return op == WarpOp::kMma || op == WarpOp::kLdMatrix; }

// ldmatrix's `arg`: the number of matrices, plus kTrans for .trans.
constexpr int kTrans = 8;

const char* OpName(WarpOp op, int arg = 0) {
  switch (op) {
    case WarpOp::kMma: return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    case WarpOp::kLdMatrix:
      switch (arg) {
        case 1: return "ldmatrix.sync.aligned.m8n8.x1.shared.b16";
        case 2: return "ldmatrix.sync.aligned.m8n8.x2.shared.b16";
        case 4: return "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
        case 1 | kTrans: return "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16";
        case 2 | kTrans: return "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16";
        case 4 | kTrans: return "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16";
      }
      return "ldmatrix (invalid variant)";
    case WarpOp::kShfl: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
    case WarpOp::kSync: return "__syncwarp";
  }
  return "?";
}

std::string Doing(const SimThread& t) {
  switch (t.wait) {
    case Wait::kDone: return "had exited";
    case Wait::kBarrier: return "was waiting at __syncthreads";
    case Wait::kWarp:
      return absl::StrFormat("was waiting at %s with mask 0x%08x", OpName(t.op, t.arg), t.mask);
    case Wait::kRunnable: return "was running";
  }
  return "?";
}

// Ends the running block with an error: back to the scheduler, for good.
[[noreturn]] void FailBlock(cudaError_t code, std::string message) {
  Run& r = *run;
  r.failure_code = code;
  r.failure = std::move(message);
  siglongjmp(r.fault_jump, 1);
}

bool ResolveWarp(Run& r, int w);

// The first runnable thread with an index of at least `from`; the thread
// count if there is none.
int NextRunnable(const Run& r, int from) {
  const int n = static_cast<int>(r.threads.size());
  while (from < n && r.threads[static_cast<size_t>(from)].wait != Wait::kRunnable) ++from;
  return from;
}

// True iff a lane of thread t's warp other than t can run.
bool WarpHasRunnable(const Run& r, int t) {
  const int n = static_cast<int>(r.threads.size());
  const int first = t / warpSize * warpSize;
  const int end = std::min(first + warpSize, n);
  // The lanes after t first: in a pass they have not run yet, so the search
  // usually ends at t + 1.
  for (int j = t + 1; j < end; ++j) {
    if (r.threads[static_cast<size_t>(j)].wait == Wait::kRunnable) return true;
  }
  for (int j = first; j < t; ++j) {
    if (r.threads[static_cast<size_t>(j)].wait == Wait::kRunnable) return true;
  }
  return false;
}

// Makes thread t the running one and switches to it from the context whose
// stack pointer goes to *save.
void SwitchTo(Run& r, int t, FiberSp* save) {
  SimThread& th = r.threads[static_cast<size_t>(t)];
  r.current = t;
  threadIdx = th.idx;
  ladder_cuda_sim_switch(save, th.sp);
}

// Suspends the running simulated thread, which now waits for `why`, and
// hands over to the next thread of the pass (RunBlock): the runnable one
// with the next higher index, or the scheduler after the last. Threads hand
// over to each other directly, so a collective costs each thread one switch,
// not two through the scheduler. When the suspending thread leaves its warp
// with no lane that can run, the warp's collectives are resolved here, as at
// the end of the pass: nothing later in the pass changes those lanes.
void Suspend(Wait why) {
  Run& r = *run;
  const int self = r.current;
  SimThread& t = r.threads[static_cast<size_t>(self)];
  t.wait = why;
  if (!WarpHasRunnable(r, self)) ResolveWarp(r, self / warpSize);
  const int next = NextRunnable(r, self + 1);
  if (next < static_cast<int>(r.threads.size())) {
    SwitchTo(r, next, &t.sp);
  } else {
    r.current = -1;
    ladder_cuda_sim_switch(&t.sp, r.scheduler_sp);
  }
}

void FiberMain(void* /*unused*/) {
  Run& r = *run;
  r.request->run(r.request->args);
  Suspend(Wait::kDone);
  __builtin_unreachable();  // the scheduler never resumes a finished thread
}

// ---- faults --------------------------------------------------------------------

void OnFault(int sig, siginfo_t* info, void* context);

struct sigaction previous_segv, previous_bus, previous_abrt;

void InstallHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnFault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    sigaction(SIGBUS, &sa, &previous_bus);
    sigaction(SIGABRT, &sa, &previous_abrt);
  });
  // A fault on a fiber's exhausted stack needs a stack of its own.
  thread_local std::vector<char> alt_stack;
  if (alt_stack.empty()) {
    alt_stack.resize(64 * 1024);
    stack_t ss;
    ss.ss_sp = alt_stack.data();
    ss.ss_size = alt_stack.size();
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
  }
}

void OnFault(int sig, siginfo_t* info, void* context) {
  Run* r = run;
  if (r == nullptr || r->current < 0) {
    // Not inside a simulated thread: not ours. Hand it to whoever was there
    // before (usually the default action: the process dies as it would have).
    struct sigaction* prev = sig == SIGSEGV ? &previous_segv
                             : sig == SIGBUS ? &previous_bus
                                             : &previous_abrt;
    sigaction(sig, prev, nullptr);
    raise(sig);
    return;
  }
  std::string what;
  cudaError_t code = cudaErrorIllegalAddress;
  if (sig == SIGABRT) {
    code = cudaErrorAssert;
    what = "abort() (a failed assert?)";
  } else if (r->stacks.InGuard(info->si_addr)) {
    code = cudaErrorLaunchFailure;
    what = "stack overflow (more than 256 KiB of locals in one thread)";
  } else {
    const auto* uc = static_cast<const ucontext_t*>(context);
    const bool write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    what = absl::StrCat("out-of-bounds ", write ? "write" : "read", ": ",
                        DescribeFault(info->si_addr));
  }
  // The message is built here, in the handler: the launch's state is intact
  // (the faulting thread was running ordinary code) and the process goes on.
  r->failure_code = code;
  r->failure = absl::StrCat(Where(*r, r->current), ": ", what);
  siglongjmp(r->fault_jump, 1);
}

// ---- warps and barriers ---------------------------------------------------------

// True iff [p, p + bytes) lies in the running block's dynamic shared memory.
bool InShared(const Run& r, const void* p, size_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(r.shared.data());
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= base && a - base <= r.request->shared_bytes &&
         bytes <= r.request->shared_bytes - (a - base);
}

// Computes a tensor-core collective (tensor_core.h) whose 32 lanes, from
// thread `first` on, have all arrived: every lane's results into its `out`.
void ResolveMatrix(Run& r, int first, WarpOp op, int arg) {
  auto lane = [&](int l) -> SimThread& { return r.threads[static_cast<size_t>(first + l)]; };
  if (op == WarpOp::kMma) {
    const MmaFragments* in[32];
    float* d[32];
    for (int l = 0; l < warpSize; ++l) {
      in[l] = static_cast<const MmaFragments*>(lane(l).in);
      d[l] = static_cast<float*>(lane(l).out);
    }
    MmaM16N8K16Bf16Warp(in, d);
    return;
  }
  const int num = arg & ~kTrans;
  const void* rows[32] = {};
  uint32_t* regs[32];
  for (int l = 0; l < warpSize; ++l) {
    regs[l] = static_cast<uint32_t*>(lane(l).out);
    if (l >= 8 * num) continue;  // .x1 and .x2 use the addresses of lanes 0-7 and 0-15 only
    const void* p = lane(l).in;
    auto where = [&] {  // built only for a failure: the check runs on every ldmatrix
      return absl::StrCat(Where(r, first + l), " (lane ", l, "): ", OpName(op, arg),
                          ": row address ", absl::StrFormat("%p", p), " (row ", l % 8,
                          " of matrix ", l / 8, ")");
    };
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      FailBlock(cudaErrorMisalignedAddress, absl::StrCat(where(), " is not 16-byte aligned"));
    }
    if (!InShared(r, p, 16)) {
      FailBlock(cudaErrorIllegalAddress,
                absl::StrCat(where(), ": its 16 bytes are not inside the block's ",
                             r.request->shared_bytes, " bytes of dynamic shared memory"));
    }
    rows[l] = p;
  }
  LdMatrixWarp(num, (arg & kTrans) != 0, rows, regs);
}

// Resolves the collectives waiting in warp `w` whose lanes have all arrived.
// A collective that can never complete fails the block. True if any resolved.
bool ResolveWarp(Run& r, int w) {
  const int n = static_cast<int>(r.threads.size());
  const int first = w * warpSize;
  const int lanes = std::min(warpSize, n - first);
  bool progress = false;
  for (int l = 0; l < lanes; ++l) {
    SimThread& t = r.threads[static_cast<size_t>(first + l)];
    if (t.wait != Wait::kWarp) continue;
    const unsigned mask = t.mask;
    const bool matrix = IsMatrixOp(t.op);
    auto where = [&] {  // built only for a failure: the checks run on every collective
      return absl::StrCat(Where(r, first + l), " (lane ", l, "): ", OpName(t.op, t.arg),
                          matrix ? std::string() : absl::StrFormat(" with mask 0x%08x", mask));
    };
    if (matrix && lanes < warpSize) {
      FailBlock(cudaErrorIllegalInstruction,
                absl::StrCat(where(), ": needs all 32 lanes of the warp, and the block has only ",
                             lanes, " threads in this warp"));
    }
    if ((mask & (1u << l)) == 0) {
      FailBlock(cudaErrorIllegalInstruction,
                absl::StrCat(where(), ": the lane is not in its mask"));
    }
    if (lanes < warpSize && (mask >> lanes) != 0) {
      FailBlock(cudaErrorIllegalInstruction,
                absl::StrCat(where(), ": the mask names lanes beyond the block's ", lanes,
                             " threads in this warp"));
    }
    if (t.width <= 0 || t.width > warpSize || (t.width & (t.width - 1)) != 0) {
      FailBlock(cudaErrorIllegalInstruction,
                absl::StrCat(where(), ": width ", t.width, " is not a power of two <= 32"));
    }
    for (int j = 0; j < lanes; ++j) {
      if ((mask & (1u << j)) == 0) continue;
      const SimThread& o = r.threads[static_cast<size_t>(first + j)];
      if (o.wait != Wait::kWarp || o.op != t.op || o.mask != mask ||
          (matrix && o.arg != t.arg)) {
        FailBlock(cudaErrorIllegalInstruction,
                  absl::StrCat(where(), ": lane ", j, matrix ? " of the warp" : " of the mask",
                               " never arrives (it ", Doing(o), ")"));
      }
    }
    if (matrix) {
      ResolveMatrix(r, first, t.op, t.arg);
      for (int j = 0; j < warpSize; ++j) {
        r.threads[static_cast<size_t>(first + j)].wait = Wait::kRunnable;
      }
      progress = true;
      continue;
    }
    // Every lane of the mask is here: compute each one's result.
    uint64_t votes = 0;
    for (int j = 0; j < lanes; ++j) {
      if ((mask & (1u << j)) != 0 && r.threads[static_cast<size_t>(first + j)].value != 0) {
        votes |= 1ull << j;
      }
    }
    for (int j = 0; j < lanes; ++j) {
      if ((mask & (1u << j)) == 0) continue;
      SimThread& o = r.threads[static_cast<size_t>(first + j)];
      const int seg = j & ~(o.width - 1);  // first lane of j's segment
      int src = j;
      switch (o.op) {
        case WarpOp::kShfl: src = seg + (o.arg & (o.width - 1)); break;
        case WarpOp::kShflUp: src = j - seg >= o.arg ? j - o.arg : j; break;
        case WarpOp::kShflDown: src = j - seg + o.arg < o.width ? j + o.arg : j; break;
        case WarpOp::kShflXor: {
          const int x = j ^ o.arg;
          src = x < seg + o.width ? x : j;  // later segments are not visible
          break;
        }
        default: break;
      }
      switch (o.op) {
        case WarpOp::kShfl:
        case WarpOp::kShflUp:
        case WarpOp::kShflDown:
        case WarpOp::kShflXor:
          if (src < 0 || src >= lanes || (mask & (1u << src)) == 0) {
            FailBlock(cudaErrorIllegalInstruction,
                      absl::StrCat(Where(r, first + j), " (lane ", j, "): ", OpName(o.op),
                                   absl::StrFormat(" with mask 0x%08x", mask), " reads lane ",
                                   src, ", which is not in the mask"));
          }
          o.result = r.threads[static_cast<size_t>(first + src)].value;
          break;
        case WarpOp::kBallot: o.result = votes; break;
        case WarpOp::kAny: o.result = votes != 0; break;
        case WarpOp::kAll: o.result = votes == (mask & 0xffffffffull); break;
        case WarpOp::kSync:
        case WarpOp::kMma:  // resolved by ResolveMatrix above
        case WarpOp::kLdMatrix: o.result = 0; break;
      }
    }
    for (int j = 0; j < lanes; ++j) {
      if ((mask & (1u << j)) != 0) r.threads[static_cast<size_t>(first + j)].wait = Wait::kRunnable;
    }
    progress = true;
  }
  return progress;
}

// Called when no thread can run: releases warps, then the barrier, or fails.
void Resolve(Run& r) {
  const int n = static_cast<int>(r.threads.size());
  bool progress = false;
  for (int w = 0; w * warpSize < n; ++w) progress |= ResolveWarp(r, w);
  if (progress) return;
  // Only barrier waiters (and finished threads) are left.
  int done = -1;
  for (int t = 0; t < n && done < 0; ++t) {
    if (r.threads[static_cast<size_t>(t)].wait == Wait::kDone) done = t;
  }
  if (done >= 0) {
    int waiter = 0;
    while (r.threads[static_cast<size_t>(waiter)].wait != Wait::kBarrier) ++waiter;
    FailBlock(cudaErrorIllegalInstruction,
              absl::StrCat(Where(r, waiter), ": __syncthreads is not reached by every thread "
                           "of the block: thread ", Dim(r.threads[static_cast<size_t>(done)].idx),
                           " had exited"));
  }
  for (SimThread& t : r.threads) t.wait = Wait::kRunnable;
}

// Runs one block to completion (or to a failure: then false).
bool RunBlock(Run& r) {
  // Poison the dynamic shared memory: a read before a write is NaN.
  std::memset(r.shared.data(), kPoisonByte, r.shared.size() * sizeof(float4));
  const int n = static_cast<int>(r.threads.size());
  for (int t = 0; t < n; ++t) {
    SimThread& th = r.threads[static_cast<size_t>(t)];
    th.wait = Wait::kRunnable;
    th.copies.clear();  // a thread's copies end with its block
    th.groups = 0;
    th.sp = r.stacks.Prepare(t, FiberMain, nullptr);
  }
  if (sigsetjmp(r.fault_jump, 0) != 0) {
    r.current = -1;
    return false;
  }
  for (;;) {
    // A pass: every runnable thread runs, in index order, until it waits or
    // exits; each hands over to the next (Suspend), the last back to here.
    const int first = NextRunnable(r, 0);
    if (first < n) {
      SwitchTo(r, first, &r.scheduler_sp);
      continue;
    }
    bool finished = true;
    for (const SimThread& th : r.threads) finished = finished && th.wait == Wait::kDone;
    if (finished) return true;
    Resolve(r);
  }
}

}  // namespace

void SyncThreads() {
  if (run == nullptr || run->current < 0) Trap("__syncthreads outside a kernel");
  Suspend(Wait::kBarrier);
}

uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  if (run == nullptr || run->current < 0) Trap("warp collective outside a kernel");
  SimThread& t = run->threads[static_cast<size_t>(run->current)];
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = width;
  Suspend(Wait::kWarp);
  return run->threads[static_cast<size_t>(run->current)].result;
}

void WarpMatrix(WarpOp op, int arg, const void* in, void* out) {
  if (run == nullptr || run->current < 0) Trap("tensor-core instruction outside a kernel");
  SimThread& t = run->threads[static_cast<size_t>(run->current)];
  t.op = op;
  t.mask = 0xffffffffu;
  t.arg = arg;
  t.width = warpSize;
  t.in = in;
  t.out = out;
  Suspend(Wait::kWarp);
}

void Trap(const char* what) {
  if (run == nullptr || run->current < 0) {
    std::fprintf(stderr, "cuda-sim: %s outside a kernel\n", what);
    std::abort();
  }
  FailBlock(cudaErrorAssert, absl::StrCat(Where(*run, run->current), ": ", what));
}

std::string KernelNameFromSignature(const char* pretty) {
  // g++: "... RunKernel(...) [with auto kKernel = <name>; Args = {...}]"
  std::string s(pretty);
  const std::string key = "kKernel = ";
  size_t b = s.find(key);
  if (b == std::string::npos) return s;
  b += key.size();
  size_t e = s.find("; ", b);
  if (e == std::string::npos) e = s.find(']', b);
  std::string name = s.substr(b, e - b);
  // Drop the namespaces of the name (not of its template arguments).
  int depth = 0;
  size_t last = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name.compare(i, 2, "::") == 0) last = i + 2;
  }
  return name.substr(last);
}

cudaError_t SetMaxDynamicShared(const void* kernel, int bytes) {
  if (StickyError() != cudaSuccess) return StickyError();
  if (bytes < 0 || static_cast<size_t>(bytes) > kMaxShared) {
    return Fail(cudaErrorInvalidValue,
                absl::StrCat("cudaFuncSetAttribute: ", bytes,
                             " bytes of dynamic shared memory is more than the 227 KiB a block "
                             "can have"));
  }
  std::lock_guard<std::mutex> lock(attr_mu);
  (*max_shared)[kernel] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

cudaError_t Launch(const LaunchRequest& q) {
  if (StickyError() != cudaSuccess) return Fail(StickyError(), cudaGetErrorString(StickyError()));
  auto kernel = [&] { return absl::StrCat("kernel ", q.kernel_name); };  // for the errors
  const uint64_t threads = uint64_t{q.block.x} * q.block.y * q.block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || q.block.z > 64 || q.grid.x == 0 ||
      q.grid.y == 0 || q.grid.z == 0 || q.grid.y > kMaxGridYZ || q.grid.z > kMaxGridYZ) {
    return Fail(cudaErrorInvalidConfiguration,
                absl::StrCat(kernel(), ": invalid launch configuration: grid ", Dim(q.grid),
                             ", block ", Dim(q.block), " (at most 1024 threads per block)"));
  }
  size_t limit = kDefaultShared;
  {
    std::lock_guard<std::mutex> lock(attr_mu);
    auto it = max_shared->find(q.kernel);
    if (it != max_shared->end()) limit = std::max(limit, it->second);
  }
  if (q.shared_bytes > limit) {
    return Fail(cudaErrorInvalidValue,
                absl::StrCat(kernel(), ": ", q.shared_bytes,
                             " bytes of dynamic shared memory, more than its limit of ", limit,
                             " (raise it with cudaFuncSetAttribute, at most 227 KiB)"));
  }
  for (int i = 0; i < q.num_pointer_args; ++i) {
    const void* p = q.pointer_args[i];
    if (p != nullptr && !IsDeviceRange(p, 0)) {
      return Fail(cudaErrorInvalidValue,
                  absl::StrFormat("%s: argument %d (%p) is not device memory", kernel(),
                                  q.pointer_arg_index[i], p));
    }
  }

  InstallHandlers();
  if (run_storage == nullptr) run_storage = new Run;  // kept for the thread's life
  Run& r = *run_storage;
  if (!r.stacks.Reserve(static_cast<int>(threads))) {
    return Fail(cudaErrorMemoryAllocation, absl::StrCat(kernel(), ": no memory for fiber stacks"));
  }
  r.request = &q;
  r.threads.assign(threads, SimThread{});
  for (unsigned z = 0, t = 0; z < q.block.z; ++z) {
    for (unsigned y = 0; y < q.block.y; ++y) {
      for (unsigned x = 0; x < q.block.x; ++x, ++t) r.threads[t].idx = {x, y, z};
    }
  }
  r.shared.assign((q.shared_bytes + sizeof(float4) - 1) / sizeof(float4), float4{});
  r.failure.clear();
  r.current = -1;

  run = &r;
  blockDim = q.block;
  gridDim = q.grid;
  bool ok = true;
  for (unsigned z = 0; ok && z < q.grid.z; ++z) {
    for (unsigned y = 0; ok && y < q.grid.y; ++y) {
      for (unsigned x = 0; ok && x < q.grid.x; ++x) {
        blockIdx = {x, y, z};
        ok = RunBlock(r);
      }
    }
  }
  run = nullptr;
  if (!ok) return Fail(r.failure_code, r.failure, /*sticky=*/true);
  const std::string slack = CheckSlack();
  if (!slack.empty()) {
    return Fail(cudaErrorIllegalAddress, absl::StrCat(kernel(), ": ", slack), /*sticky=*/true);
  }
  return cudaSuccess;
}

}  // namespace internal

// ---- tensor-core instructions (tensor_core.h) ------------------------------------

void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  const internal::MmaFragments in{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}};
  float out[4];
  internal::WarpMatrix(internal::WarpOp::kMma, 0, &in, out);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

void LdMatrix(int num, bool trans, uint32_t* r, const void* row) {
  if (num != 1 && num != 2 && num != 4) internal::Trap("ldmatrix of other than 1, 2 or 4 matrices");
  uint32_t out[4];
  internal::WarpMatrix(internal::WarpOp::kLdMatrix, num | (trans ? internal::kTrans : 0), row,
                       out);
  for (int i = 0; i < num; ++i) r[i] = out[i];
}

void CpAsync16(void* smem, const void* gmem) {
  using namespace internal;
  if (run == nullptr || run->current < 0) Trap("cp.async outside a kernel");
  Run& r = *run;
  auto fail = [&](cudaError_t code, const std::string& what) {
    FailBlock(code, absl::StrCat(Where(r, r.current), ": cp.async.cg.shared.global [",
                                 absl::StrFormat("%p], [%p], 16: ", smem, gmem), what));
  };
  if (reinterpret_cast<uintptr_t>(smem) % 16 != 0 || reinterpret_cast<uintptr_t>(gmem) % 16 != 0) {
    fail(cudaErrorMisalignedAddress, "both addresses must be 16-byte aligned");
  }
  if (!InShared(r, smem, 16)) {
    fail(cudaErrorIllegalAddress,
         absl::StrCat("the destination's 16 bytes are not inside the block's ",
                      r.request->shared_bytes, " bytes of dynamic shared memory"));
  }
  if (!IsDeviceRange(gmem, 16)) {
    fail(cudaErrorIllegalAddress, "the source's 16 bytes are not inside one device allocation");
  }
  // In flight: the destination holds garbage until a wait_group completes the copy.
  std::memset(smem, kPoisonByte, 16);
  r.threads[static_cast<size_t>(r.current)].copies.push_back({smem, gmem, -1});
}

void CpAsyncCommitGroup() {
  using namespace internal;
  if (run == nullptr || run->current < 0) Trap("cp.async.commit_group outside a kernel");
  SimThread& t = run->threads[static_cast<size_t>(run->current)];
  for (PendingCopy& c : t.copies) {
    if (c.group < 0) c.group = t.groups;
  }
  ++t.groups;  // an empty group is a group too
}

void CpAsyncWaitGroup(int n) {
  using namespace internal;
  if (run == nullptr || run->current < 0) Trap("cp.async.wait_group outside a kernel");
  SimThread& t = run->threads[static_cast<size_t>(run->current)];
  // Complete every committed group but the n most recent, in issue order.
  const int64_t done_below = t.groups - n;
  size_t kept = 0;
  for (PendingCopy& c : t.copies) {
    if (c.group >= 0 && c.group < done_below) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      t.copies[kept++] = c;
    }
  }
  t.copies.resize(kept);
}

void* DynamicSharedMemory() {
  using internal::run;
  return run == nullptr || run->shared.empty() ? nullptr : run->shared.data();
}

}  // namespace cuda_sim
}  // namespace ladder
