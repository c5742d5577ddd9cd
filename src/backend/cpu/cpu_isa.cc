#include "src/backend/cpu/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace ladder {
namespace {

// -1: no ScopedCpuIsa on this thread; else the CpuIsa it set.
thread_local int override_isa = -1;

CpuIsa Detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

// The level LADDER_CPU_ISA asks for, capped to the CPU's; notes on stderr
// (once: the caller caches the result) when the request cannot be honoured.
CpuIsa FromEnvironment() {
  const CpuIsa best = SupportedCpuIsa();
  const char* want = std::getenv("LADDER_CPU_ISA");
  if (want == nullptr || *want == '\0') return best;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (std::strcmp(want, CpuIsaName(isa)) != 0) continue;
    if (isa <= best) return isa;
    std::fprintf(stderr, "ladder: LADDER_CPU_ISA=%s is not supported by this CPU; using %s\n", want,
                 CpuIsaName(best));
    return best;
  }
  std::fprintf(stderr, "ladder: LADDER_CPU_ISA=%s is not one of portable, avx2, avx512; using %s\n",
               want, CpuIsaName(best));
  return best;
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

CpuIsa SupportedCpuIsa() {
  static const CpuIsa best = Detect();
  return best;
}

CpuIsa ActiveCpuIsa() {
  if (override_isa >= 0) return static_cast<CpuIsa>(override_isa);
  static const CpuIsa chosen = FromEnvironment();
  return chosen;
}

ScopedCpuIsa::ScopedCpuIsa(CpuIsa isa) : previous_(override_isa) {
  override_isa = static_cast<int>(isa <= SupportedCpuIsa() ? isa : SupportedCpuIsa());
}

ScopedCpuIsa::~ScopedCpuIsa() { override_isa = previous_; }

}  // namespace ladder
