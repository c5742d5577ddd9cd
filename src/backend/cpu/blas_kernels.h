// Making OpenBLAS run the kernels this CPU can run.
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) carries one set of kernels per CPU
// generation ("core": Prescott, Sandybridge, Haswell, Zen, SkylakeX, ...) and
// picks one in its library constructor, before main(), from the CPU's family
// and model numbers, or from OPENBLAS_CORETYPE when that is set. A CPU newer
// than the library can land in the wrong branch: OpenBLAS 0.3.21 sends Intel
// family-6 models it does not list (Emerald Rapids, Raptor Lake) to its
// Prescott (SSE3) kernels, and sgemm runs about 4x slower than it could.
//
// EnsureBlasKernels, at the top of main(), compares the core OpenBLAS chose
// with what the CPU and the OS support (CPUID and XGETBV, read here). When the
// core is older, it sets OPENBLAS_CORETYPE and re-executes the binary, so the
// constructor runs again and picks the right kernels. It never picks a core
// the CPU lacks and never overrides a user's OPENBLAS_CORETYPE.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ladder {

// What CPUID and XGETBV say about this CPU. A vector flag is true only when
// the CPU has the instructions AND the OS saves their registers on a context
// switch (XCR0): without that, using them faults or corrupts state.
struct CpuFeatures {
  enum class Vendor { kIntel, kAmd, kOther };
  Vendor vendor = Vendor::kOther;
  int family = 0;  // with the extended family folded in (AMD Zen 3 = 0x19)
  int model = 0;   // with the extended model folded in (Emerald Rapids = 0xCF)
  bool sse3 = false;
  bool ssse3 = false;
  bool sse4_1 = false;
  bool sse4_2 = false;
  bool avx = false;  // avx, fma and avx2 need os_ymm
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;  // every avx512 flag needs os_zmm
  bool avx512cd = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool os_ymm = false;  // XCR0 bits 1, 2: the OS saves xmm and ymm registers
  bool os_zmm = false;  // os_ymm and XCR0 bits 5, 6, 7: opmask and zmm registers
};

// Reads this CPU's features. Never fails: what CPUID does not report is false.
// Any thread.
CpuFeatures ReadCpuFeatures();

// The OpenBLAS core to force instead of `detected_core` (a name as
// openblas_get_corename() returns it, compared ignoring case as OpenBLAS
// does), or nullopt to leave OpenBLAS alone. A core is returned only when the
// detected core's kernels use a narrower instruction set than `cpu` supports:
//   AVX-512 F+CD+BW+DQ+VL (and os_zmm)  -> "SkylakeX"
//   AVX2 + FMA (and os_ymm)             -> "Zen" on AMD, else "Haswell"
//   AVX (and os_ymm)                    -> "Sandybridge"
// so it never names a core whose instructions the CPU or OS lacks. A detected
// name this table does not know gives nullopt. Pure; any thread.
std::optional<std::string> BetterOpenBlasCore(std::string_view detected_core,
                                              const CpuFeatures& cpu);

// Call first in main(), before MPI or anything else starts. It does nothing
// when OPENBLAS_CORETYPE is set and not empty (the user's choice stands) or
// when OpenBLAS was built for one CPU (no DYNAMIC_ARCH: nothing to switch to).
// Else, when BetterOpenBlasCore names a core, it prints one line on stderr
// (first rank only), sets OPENBLAS_CORETYPE and LADDER_BLAS_DETECTED (the core
// OpenBLAS chose, for BlasSummary) and replaces the process with a fresh run of
// the same binary and arguments (execv of /proc/self/exe: same process id, so
// mpirun and srun keep tracking it). It returns only when nothing needed
// changing, or when the exec failed (one more line on stderr; the run goes on
// with the slow kernels). The restarted run finds OPENBLAS_CORETYPE set, so it
// cannot loop. Main thread, while it is the only thread.
void EnsureBlasKernels(char** argv);

// One line about the BLAS library for `ladder version` and the benchmarks:
//   "OpenBLAS 0.3.21 (OpenMP), kernels Zen (detected)"
//   "OpenBLAS 0.3.21 (OpenMP), kernels SkylakeX (set by ladder: OpenBLAS detected Prescott)"
//   "OpenBLAS 0.3.21 (OpenMP), kernels Haswell (OPENBLAS_CORETYPE=Haswell)"
// Any thread.
std::string BlasSummary();

}  // namespace ladder
