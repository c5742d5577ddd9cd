// Which SIMD instruction set the CPU kernels use, chosen at run time.
//
// The few kernels that gain from explicit wide vectors (the few-token
// matmul, int8 matmul, int8 paged attention) are compiled once per level
// from one source (simd.h), whatever the build's -march, so a binary built
// for plain x86-64 (meson -Dnative=false) still uses the levels its CPU
// has. Each call picks one from ActiveCpuIsa():
//   avx512: avx512f + bw + vl + vnni (Cascade Lake, Ice Lake, Zen 4 and
//           later), 16 floats or 64 int8 per register, int8 dot products
//   avx2:   avx2 + fma, 8 floats or 32 int8 per register
//   portable: plain loops (the reference the others are tested against)
// LADDER_CPU_ISA=portable|avx2|avx512 caps the level (to compare or debug);
// a level the CPU lacks falls back to the best it has, with one note on stderr.
#pragma once

namespace ladder {

enum class CpuIsa { kPortable, kAvx2, kAvx512 };  // ordered: higher is wider

const char* CpuIsaName(CpuIsa isa);

// The best level this CPU supports (ignores LADDER_CPU_ISA and overrides).
CpuIsa SupportedCpuIsa();

// The level kernels run at: a ScopedCpuIsa's on this thread if one is alive,
// else LADDER_CPU_ISA (capped to what the CPU supports), else the best.
// Ops read it once on the calling thread, before their parallel region.
CpuIsa ActiveCpuIsa();

// Runs this thread's ops at `isa` (capped to SupportedCpuIsa()) while alive,
// so tests can compare every level in one process.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa);
  ~ScopedCpuIsa();
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  int previous_;  // the override it replaced, -1 for none
};

}  // namespace ladder
