// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Why counter-based: the n-th number of a stream is a pure function of
// (seed, stream, n). A GPU thread, a CPU loop, a tensor-parallel shard or a
// resumed run can each compute exactly the values it needs without replaying
// the sequence. Initial weights use this to give every parallel layout the same
// starting point: element i of logical tensor k is always drawn from
// (seed, stream=k, counter=i), whichever rank owns it.
#pragma once

#include <array>
#include <cstdint>

namespace ladder {

// The streams ladder draws from, kept in disjoint ranges so that no two uses
// ever share random numbers under the same seed.
inline constexpr uint64_t kInitStream = 0;                     // + parameter index
inline constexpr uint64_t kShuffleStream = uint64_t{1} << 48;  // + epoch
inline constexpr uint64_t kSyntheticDataStream = uint64_t{2} << 48;
inline constexpr uint64_t kSamplingStream = uint64_t{3} << 48;  // + request
inline constexpr uint64_t kRoundingStream = uint64_t{4} << 48;  // + optimizer step

// One Philox4x32-10 block: four 32-bit random words for a 128-bit counter.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Word `index` of the stream (seed, stream): word index % 4 of the block at
// counter (index / 4, stream) under key seed. PhiloxStream reads the words in
// order; code that needs word i alone (a GPU thread, one element of a
// buffer) computes it directly.
uint32_t PhiloxWord(uint64_t seed, uint64_t stream, uint64_t index);

// The random word of element `index` of a buffer rounded stochastically to
// bf16 at optimizer step `step` (backend.h StochasticRounding).
inline uint32_t RoundingWord(uint64_t seed, uint64_t step, int64_t index) {
  return PhiloxWord(seed, kRoundingStream + step, static_cast<uint64_t>(index));
}

// Uniform float in (0, 1) from 32 random bits (never exactly 0 or 1).
inline float UniformFromBits(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// Writes elements [begin, begin + count) of the normal stream (seed, stream)
// scaled to N(mean, stddev) into out[0..count). Element i depends only on
// (seed, stream, i), so a shard can draw its slice of a logical tensor.
void FillNormal(float* out, int64_t begin, int64_t count, uint64_t seed, uint64_t stream,
                float mean, float stddev);

// A sequential generator over one (seed, stream). Its whole state is the
// position `offset`, so it can be saved and restored exactly.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream, uint64_t offset = 0)
      : seed_(seed), stream_(stream), offset_(offset) {}

  uint32_t NextU32();
  float NextUniform() { return UniformFromBits(NextU32()); }
  uint64_t offset() const { return offset_; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t offset_;  // index of the next 32-bit word
};

}  // namespace ladder
