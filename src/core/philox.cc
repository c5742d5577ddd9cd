#include "src/core/philox.h"

#include <cmath>

namespace ladder {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

std::array<uint32_t, 4> CounterFor(uint64_t index, uint64_t stream) {
  return {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
          static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
}

std::array<uint32_t, 2> KeyFor(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, c[0], &hi0, &lo0);
    MulHiLo(kMul1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

void FillNormal(float* out, int64_t begin, int64_t count, uint64_t seed, uint64_t stream,
                float mean, float stddev) {
  // Box-Muller turns two uniforms into two normals; block j of the counter
  // yields elements 2j and 2j+1, so any element can be computed on its own.
  const auto key = KeyFor(seed);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t e = begin + i;
    const auto r = Philox4x32(CounterFor(static_cast<uint64_t>(e / 2), stream), key);
    const double u1 = UniformFromBits(r[0]);
    const double u2 = UniformFromBits(r[1]);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    const double z = (e % 2 == 0) ? radius * std::cos(angle) : radius * std::sin(angle);
    out[i] = mean + stddev * static_cast<float>(z);
  }
}

uint32_t PhiloxWord(uint64_t seed, uint64_t stream, uint64_t index) {
  return Philox4x32(CounterFor(index / 4, stream), KeyFor(seed))[index % 4];
}

uint32_t PhiloxStream::NextU32() { return PhiloxWord(seed_, stream_, offset_++); }

}  // namespace ladder
