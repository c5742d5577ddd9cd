// What the backend tests share: fresh random inputs and the ISA levels
// (cpu_isa.h) this CPU can run, so each test runs every level it can.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "src/backend/cpu/cpu_isa.h"

namespace ladder::testing_inputs {

// n floats uniform in [lo, hi), a fixed stream per seed.
inline std::vector<float> Uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

// n ints uniform in [0, hi), a fixed stream per seed.
inline std::vector<int32_t> RandomInts(size_t n, uint32_t seed, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, hi - 1);
  std::vector<int32_t> x(n);
  for (int32_t& v : x) v = u(rng);
  return x;
}

// The levels this CPU can run, portable first.
inline std::vector<CpuIsa> Levels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa <= SupportedCpuIsa()) levels.push_back(isa);
  }
  return levels;
}

}  // namespace ladder::testing_inputs
