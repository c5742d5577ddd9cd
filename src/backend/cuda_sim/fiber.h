// Fibers for the simulated threads of a block: each has its own stack and
// runs until it switches back to the scheduler. A switch saves and restores
// only what the x86-64 System V ABI says a called function preserves (rbx,
// rbp, r12-r15, the stack pointer, and the SSE/x87 control words), so it
// costs a few nanoseconds and never enters the kernel (unlike swapcontext,
// which changes the signal mask with a system call on every switch).
//
// Not thread-safe by itself: a fiber set belongs to the host thread running
// the launch (scheduler.cc keeps one per host thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ladder {
namespace cuda_sim {
namespace internal {

// A stack pointer saved by a switch.
using FiberSp = void*;

// Switches from the running context (its stack pointer saved into *save) to
// the one saved in `load`. Returns when something switches back to *save.
extern "C" void ladder_cuda_sim_switch(FiberSp* save, FiberSp load);

// Stacks for up to `count` fibers, each `bytes` long with an inaccessible
// guard page below it (a stack overflow faults instead of corrupting the
// neighbour). Allocated once and reused by every launch.
class FiberStacks {
 public:
  static constexpr size_t kStackBytes = 256 * 1024;
  FiberStacks() = default;
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;

  // Makes room for `count` stacks (keeps existing ones). False if out of memory.
  bool Reserve(int count);
  // A fresh context that, when switched to, calls entry(arg) on stack `i`.
  // entry must never return (it switches away for the last time instead).
  FiberSp Prepare(int i, void (*entry)(void*), void* arg);
  // True iff `addr` lies in one of the guard pages.
  bool InGuard(const void* addr) const;

 private:
  struct Region {
    char* base;
    size_t bytes;
    int count;
  };
  std::vector<Region> regions_;
  std::vector<char*> tops_;  // one per stack
};

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
