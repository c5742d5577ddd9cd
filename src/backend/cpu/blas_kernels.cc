#include "src/backend/cpu/blas_kernels.h"

#include <cblas.h>
#include <cpuid.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/launcher_env.h"

namespace ladder {
namespace {

// The widest instruction set a kernel set uses; ordered, higher is wider.
enum class Isa { kSse, kAvx, kAvx2, kAvx512 };

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kSse:
      return "SSE";
    case Isa::kAvx:
      return "AVX";
    case Isa::kAvx2:
      return "AVX2";
    case Isa::kAvx512:
      return "AVX-512";
  }
  return "?";
}

// The level of an OpenBLAS x86-64 DYNAMIC_ARCH core (driver/others/dynamic.c,
// corename[]): the widest instructions its kernels use. OpenBLAS matches names
// with strncasecmp(name, corename[i], 20); none is that long, so this is
// equality ignoring case. nullopt for a name not listed here.
std::optional<Isa> CoreIsaOf(std::string_view core) {
  // Intel before Sandy Bridge, AMD before Bulldozer, VIA Nano. The 32-bit
  // names (Katmai, Coppermine, Northwood, Banias, Athlon) run as Prescott.
  constexpr const char* kSse[] = {"Katmai",       "Coppermine", "Northwood", "Prescott",
                                  "Banias",       "Atom",       "Core2",     "Penryn",
                                  "Dunnington",   "Nehalem",    "Athlon",    "Opteron",
                                  "Opteron_SSE3", "Barcelona",  "Nano",      "Bobcat"};
  constexpr const char* kAvx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
  // Excavator's kernels are Piledriver's (AVX), but OpenBLAS picks it only for
  // AMD's own AVX2 CPUs of that family: ranked AVX2, so ladder leaves it alone.
  constexpr const char* kAvx2[] = {"Haswell", "Excavator", "Zen"};
  // SapphireRapids is newer than OpenBLAS 0.3.21, listed for newer libraries.
  constexpr const char* kAvx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  const std::string detected(core);
  const auto listed = [&detected](const auto& names) {
    for (const char* name : names) {
      if (strcasecmp(detected.c_str(), name) == 0) return true;
    }
    return false;
  };
  if (listed(kSse)) return Isa::kSse;
  if (listed(kAvx)) return Isa::kAvx;
  if (listed(kAvx2)) return Isa::kAvx2;
  if (listed(kAvx512)) return Isa::kAvx512;
  return std::nullopt;
}

// The widest level whose kernels this CPU and OS can run.
Isa CpuIsaOf(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512cd && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl && cpu.os_zmm) {
    return Isa::kAvx512;
  }
  if (cpu.avx2 && cpu.fma && cpu.os_ymm) return Isa::kAvx2;
  if (cpu.avx && cpu.os_ymm) return Isa::kAvx;
  return Isa::kSse;
}

uint64_t ReadXcr0() {
  uint32_t low, high;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (uint64_t{high} << 32) | low;
}

bool Bit(unsigned reg, int bit) { return (reg >> bit) & 1; }

bool IsSet(const char* value) { return value != nullptr && *value != '\0'; }

}  // namespace

CpuFeatures ReadCpuFeatures() {
  CpuFeatures cpu;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(0, 0, &eax, &ebx, &ecx, &edx)) return cpu;
  const unsigned max_leaf = eax;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "GenuineIntel") == 0) cpu.vendor = CpuFeatures::Vendor::kIntel;
  if (std::strcmp(vendor, "AuthenticAMD") == 0) cpu.vendor = CpuFeatures::Vendor::kAmd;
  if (max_leaf < 1) return cpu;

  __get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx);
  const int base_family = (eax >> 8) & 0xf;
  cpu.family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
  cpu.model = (eax >> 4) & 0xf;
  if (base_family == 0x6 || base_family == 0xf) cpu.model |= ((eax >> 16) & 0xf) << 4;
  cpu.sse3 = Bit(ecx, 0);
  cpu.ssse3 = Bit(ecx, 9);
  cpu.sse4_1 = Bit(ecx, 19);
  cpu.sse4_2 = Bit(ecx, 20);
  // XGETBV exists only when OSXSAVE says the OS has enabled XSAVE; XCR0 then
  // lists the register states the OS saves.
  if (Bit(ecx, 27)) {
    const uint64_t xcr0 = ReadXcr0();
    cpu.os_ymm = (xcr0 & 0x6) == 0x6;
    cpu.os_zmm = cpu.os_ymm && (xcr0 & 0xe0) == 0xe0;
  }
  cpu.avx = cpu.os_ymm && Bit(ecx, 28);
  cpu.fma = cpu.os_ymm && Bit(ecx, 12);
  if (max_leaf < 7) return cpu;

  __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx);
  const unsigned max_subleaf = eax;
  cpu.avx2 = cpu.os_ymm && Bit(ebx, 5);
  cpu.avx512f = cpu.os_zmm && Bit(ebx, 16);
  cpu.avx512dq = cpu.os_zmm && Bit(ebx, 17);
  cpu.avx512cd = cpu.os_zmm && Bit(ebx, 28);
  cpu.avx512bw = cpu.os_zmm && Bit(ebx, 30);
  cpu.avx512vl = cpu.os_zmm && Bit(ebx, 31);
  cpu.avx512_vnni = cpu.os_zmm && Bit(ecx, 11);
  if (max_subleaf >= 1) {
    __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx);
    cpu.avx512_bf16 = cpu.os_zmm && Bit(eax, 5);
  }
  return cpu;
}

std::optional<std::string> BetterOpenBlasCore(std::string_view detected_core,
                                              const CpuFeatures& cpu) {
  const std::optional<Isa> detected = CoreIsaOf(detected_core);
  const Isa best = CpuIsaOf(cpu);
  if (!detected.has_value() || *detected >= best) return std::nullopt;
  switch (best) {
    case Isa::kAvx512:
      return "SkylakeX";
    case Isa::kAvx2:
      return cpu.vendor == CpuFeatures::Vendor::kAmd ? "Zen" : "Haswell";
    case Isa::kAvx:
      return "Sandybridge";
    case Isa::kSse:
      break;
  }
  return std::nullopt;
}

void EnsureBlasKernels(char** argv) {
  if (IsSet(std::getenv("OPENBLAS_CORETYPE"))) return;
  // Only a DYNAMIC_ARCH library carries other kernels to switch to.
  if (std::strstr(openblas_get_config(), "DYNAMIC_ARCH") == nullptr) return;
  const std::string detected = openblas_get_corename();
  const CpuFeatures cpu = ReadCpuFeatures();
  const std::optional<std::string> better = BetterOpenBlasCore(detected, cpu);
  if (!better.has_value()) return;
  if (IsFirstLaunchedRank()) {
    std::fprintf(stderr,
                 "ladder: OpenBLAS chose its %s kernels on a CPU with %s; restarting with "
                 "OPENBLAS_CORETYPE=%s\n",
                 detected.c_str(), IsaName(CpuIsaOf(cpu)), better->c_str());
  }
  setenv("OPENBLAS_CORETYPE", better->c_str(), 1);
  setenv("LADDER_BLAS_DETECTED", detected.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Only reached when the exec failed. Undo, so BlasSummary tells the truth.
  const int error = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("LADDER_BLAS_DETECTED");
  if (IsFirstLaunchedRank()) {
    std::fprintf(stderr, "ladder: could not restart (%s); running on OpenBLAS's %s kernels\n",
                 std::strerror(error), detected.c_str());
  }
}

std::string BlasSummary() {
  // openblas_get_config() starts "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep the
  // name and version of the library actually loaded.
  std::string config = openblas_get_config();
  config = config.substr(0, config.find(' ', config.find(' ') + 1));
  const int parallel = openblas_get_parallel();
  const char* threading = parallel == 0   ? "sequential"
                          : parallel == 1 ? "pthreads"
                          : parallel == 2 ? "OpenMP"
                                          : "unknown threading";
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* detected = std::getenv("LADDER_BLAS_DETECTED");
  std::string source = "detected";
  if (IsSet(coretype) && IsSet(detected)) {
    source = absl::StrCat("set by ladder: OpenBLAS detected ", detected);
  } else if (IsSet(coretype)) {
    source = absl::StrCat("OPENBLAS_CORETYPE=", coretype);
  }
  return absl::StrCat(config, " (", threading, "), kernels ", openblas_get_corename(), " (", source,
                      ")");
}

}  // namespace ladder
