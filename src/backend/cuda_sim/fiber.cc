#include "src/backend/cuda_sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "the CUDA simulator's fibers switch stacks with x86-64 code (fiber.cc)"
#endif

// The switch, and the first frame of every fiber. ladder_cuda_sim_switch
// pushes the callee-saved registers and the control words on the current
// stack, stores the stack pointer, loads the other one and pops the same
// layout from it. A new fiber's stack is prepared with that layout (see
// Prepare), whose return address is ladder_cuda_sim_fiber_start: it calls
// entry(arg), which Prepare left in r12 and r13.
asm(R"(
  .text
  .globl ladder_cuda_sim_switch
  .hidden ladder_cuda_sim_switch
  .type ladder_cuda_sim_switch, @function
ladder_cuda_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ladder_cuda_sim_switch, .-ladder_cuda_sim_switch

  .globl ladder_cuda_sim_fiber_start
  .hidden ladder_cuda_sim_fiber_start
  .type ladder_cuda_sim_fiber_start, @function
ladder_cuda_sim_fiber_start:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size ladder_cuda_sim_fiber_start, .-ladder_cuda_sim_fiber_start
)");

extern "C" void ladder_cuda_sim_fiber_start();

namespace ladder {
namespace cuda_sim {
namespace internal {
namespace {

size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

FiberStacks::~FiberStacks() {
  for (const Region& r : regions_) munmap(r.base, r.bytes);
}

bool FiberStacks::Reserve(int count) {
  const int have = static_cast<int>(tops_.size());
  if (count <= have) return true;
  const int add = count - have;
  const size_t page = PageBytes();
  const size_t each = page + kStackBytes;  // guard page, then the stack
  const size_t bytes = each * static_cast<size_t>(add);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return false;
  char* base = static_cast<char*>(p);
  for (int i = 0; i < add; ++i) {
    char* guard = base + each * static_cast<size_t>(i);
    if (mprotect(guard, page, PROT_NONE) != 0) {
      munmap(base, bytes);
      return false;
    }
  }
  regions_.push_back({base, bytes, add});
  for (int i = 0; i < add; ++i) tops_.push_back(base + each * static_cast<size_t>(i + 1));
  return true;
}

FiberSp FiberStacks::Prepare(int i, void (*entry)(void*), void* arg) {
  // The frame ladder_cuda_sim_switch pops, from the lowest address up:
  //   [0] x87 control word  [1] MXCSR  [2] r15  [3] r14  [4] r13 = arg
  //   [5] r12 = entry  [6] rbx  [7] rbp  [8] return address = fiber_start
  // After the `ret` the stack pointer is 16-byte aligned, as the call in
  // fiber_start needs.
  auto* top = reinterpret_cast<uint64_t*>(tops_[static_cast<size_t>(i)]);  // 16-byte aligned
  uint64_t* sp = top - 11;  // 88 bytes below the top: sp + 72 is aligned
  uint16_t fcw = 0;
  uint32_t mxcsr = 0;
  asm volatile("fnstcw %0" : "=m"(fcw));
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  sp[0] = fcw;
  sp[1] = mxcsr;
  sp[2] = sp[3] = 0;
  sp[4] = reinterpret_cast<uint64_t>(arg);
  sp[5] = reinterpret_cast<uint64_t>(entry);
  sp[6] = sp[7] = 0;
  sp[8] = reinterpret_cast<uint64_t>(&ladder_cuda_sim_fiber_start);
  return sp;
}

bool FiberStacks::InGuard(const void* addr) const {
  const char* a = static_cast<const char*>(addr);
  const size_t page = PageBytes();
  const size_t each = page + kStackBytes;
  for (const Region& r : regions_) {
    if (a < r.base || a >= r.base + r.bytes) continue;
    return static_cast<size_t>(a - r.base) % each < page;
  }
  return false;
}

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder
