// Tests of blas_kernels.h: which OpenBLAS core ladder forces, on feature sets
// recorded from real CPUs (as ReadCpuFeatures returns them), and that
// ReadCpuFeatures agrees with the compiler's own CPU detection here.
//
// What each asserts:
//  - a core older than the CPU is replaced by the widest one the CPU and OS
//    can run (SkylakeX, Haswell / Zen, Sandybridge), and by nothing wider;
//  - a core at the CPU's level, a CPU with nothing better, and a core name
//    not in the table leave OpenBLAS alone;
//  - names compare ignoring case, as OpenBLAS's force_coretype does.
#include "src/backend/cpu/blas_kernels.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace ladder {
namespace {

using Vendor = CpuFeatures::Vendor;

// Intel Nehalem (Xeon X5570, family 6 model 0x1A): SSE4.2, no AVX.
CpuFeatures Nehalem() {
  CpuFeatures cpu;
  cpu.vendor = Vendor::kIntel;
  cpu.family = 6;
  cpu.model = 0x1a;
  cpu.sse3 = cpu.ssse3 = cpu.sse4_1 = cpu.sse4_2 = true;
  return cpu;
}

// Intel Haswell (Xeon E5-2699 v3, model 0x3F): AVX2 + FMA.
CpuFeatures Haswell() {
  CpuFeatures cpu = Nehalem();
  cpu.model = 0x3f;
  cpu.os_ymm = cpu.avx = cpu.fma = cpu.avx2 = true;
  return cpu;
}

// Intel Skylake-SP (Xeon Platinum 8180, model 0x55): AVX-512 F CD BW DQ VL.
CpuFeatures SkylakeX() {
  CpuFeatures cpu = Haswell();
  cpu.model = 0x55;
  cpu.os_zmm = true;
  cpu.avx512f = cpu.avx512cd = cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = true;
  return cpu;
}

// Intel Emerald Rapids (Xeon Platinum 8592+, model 0xCF), the same features
// as Sapphire Rapids (0x8F) with VNNI and BF16. OpenBLAS 0.3.21 knows 0x8F
// (Cooperlake) but sends 0xCF to Prescott: its switch on the extended model
// has no case 0xC and falls through to family 15 (fixed in 0.3.26).
CpuFeatures EmeraldRapids() {
  CpuFeatures cpu = SkylakeX();
  cpu.model = 0xcf;
  cpu.avx512_vnni = cpu.avx512_bf16 = true;
  return cpu;
}

// AMD Zen 3 (EPYC 7763, family 0x19 model 0x01): AVX2 + FMA, no AVX-512.
CpuFeatures Zen3() {
  CpuFeatures cpu = Haswell();
  cpu.vendor = Vendor::kAmd;
  cpu.family = 0x19;
  cpu.model = 0x01;
  return cpu;
}

// AMD Zen 4 (EPYC 9654, family 0x19 model 0x11): AVX-512 with VNNI and BF16.
CpuFeatures Zen4() {
  CpuFeatures cpu = EmeraldRapids();
  cpu.vendor = Vendor::kAmd;
  cpu.family = 0x19;
  cpu.model = 0x11;
  return cpu;
}

TEST(BetterOpenBlasCore, EmeraldRapidsOnPrescottGetsSkylakeX) {
  EXPECT_EQ(BetterOpenBlasCore("Prescott", EmeraldRapids()), "SkylakeX");
}

TEST(BetterOpenBlasCore, WithoutOsZmmStateAvx512IsNotUsed) {
  CpuFeatures cpu = EmeraldRapids();
  cpu.os_zmm = false;  // e.g. a kernel booted with AVX-512 state disabled
  EXPECT_EQ(BetterOpenBlasCore("Prescott", cpu), "Haswell");
  // ReadCpuFeatures clears the AVX-512 flags too; the answer is the same.
  cpu.avx512f = cpu.avx512cd = cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = false;
  cpu.avx512_vnni = cpu.avx512_bf16 = false;
  EXPECT_EQ(BetterOpenBlasCore("Prescott", cpu), "Haswell");
}

TEST(BetterOpenBlasCore, WithoutOsYmmStateOnlySseIsUsed) {
  CpuFeatures cpu = Haswell();
  cpu.os_ymm = false;
  EXPECT_EQ(BetterOpenBlasCore("Prescott", cpu), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", cpu), std::nullopt);
}

TEST(BetterOpenBlasCore, CorrectDetectionIsLeftAlone) {
  EXPECT_EQ(BetterOpenBlasCore("Zen", Zen3()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("SkylakeX", SkylakeX()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Cooperlake", EmeraldRapids()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Haswell", Haswell()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", Nehalem()), std::nullopt);
}

TEST(BetterOpenBlasCore, HaswellOnPrescottGetsHaswell) {
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Haswell()), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("Sandybridge", Haswell()), "Haswell");
}

TEST(BetterOpenBlasCore, AmdGetsZenKernels) {
  EXPECT_EQ(BetterOpenBlasCore("Barcelona", Zen3()), "Zen");
  EXPECT_EQ(BetterOpenBlasCore("Zen", Zen4()), "SkylakeX");
}

TEST(BetterOpenBlasCore, AvxOnlyCpuGetsSandybridge) {
  CpuFeatures cpu = Haswell();  // as a Sandy Bridge: AVX, no FMA or AVX2
  cpu.model = 0x2d;
  cpu.fma = cpu.avx2 = false;
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", cpu), "Sandybridge");
  EXPECT_EQ(BetterOpenBlasCore("Sandybridge", cpu), std::nullopt);
  cpu.avx2 = true;  // AVX2 without FMA is not enough for the Haswell kernels
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", cpu), "Sandybridge");
}

TEST(BetterOpenBlasCore, SseOnlyCpuHasNothingBetter) {
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Nehalem()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Core2", Nehalem()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Prescott", CpuFeatures{}), std::nullopt);
}

TEST(BetterOpenBlasCore, UnknownCoreIsLeftAlone) {
  EXPECT_EQ(BetterOpenBlasCore("Unknown", EmeraldRapids()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("NeoverseN1", EmeraldRapids()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("", EmeraldRapids()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Prescott2", EmeraldRapids()), std::nullopt);
}

TEST(BetterOpenBlasCore, NamesIgnoreCaseAsOpenBlasDoes) {
  EXPECT_EQ(BetterOpenBlasCore("prescott", EmeraldRapids()), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("PRESCOTT", Haswell()), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("SANDYBRIDGE", Haswell()), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("skylakex", EmeraldRapids()), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("zen", Zen3()), std::nullopt);
}

TEST(ReadCpuFeatures, AgreesWithTheCompiler) {
  __builtin_cpu_init();
  const CpuFeatures cpu = ReadCpuFeatures();
  EXPECT_EQ(cpu.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(cpu.fma, __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(cpu.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(cpu.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(cpu.sse4_2, __builtin_cpu_supports("sse4.2") != 0);
  EXPECT_EQ(cpu.vendor == CpuFeatures::Vendor::kIntel, __builtin_cpu_is("intel") != 0);
  EXPECT_EQ(cpu.vendor == CpuFeatures::Vendor::kAmd, __builtin_cpu_is("amd") != 0);
  // The OS state flags imply each other in this order.
  EXPECT_TRUE(!cpu.os_zmm || cpu.os_ymm);
  EXPECT_TRUE(!cpu.avx512f || cpu.os_zmm);
}

}  // namespace
}  // namespace ladder
