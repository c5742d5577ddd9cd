// CRC-32: the standard check value, and the slicing-by-8 loop against the
// plain byte-at-a-time definition at every length and alignment.
#include "src/core/crc32.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace ladder {
namespace {

uint32_t Reference(uint32_t crc, const unsigned char* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32Test, CheckValue) { EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u); }

TEST(Crc32Test, MatchesTheBitwiseDefinitionAndContinues) {
  std::mt19937 rng(3);
  std::string data(300, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  for (size_t start = 0; start < 8; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += 1 + n / 8) {
      ASSERT_EQ(Crc32(0, p + start, n), Reference(0, p + start, n)) << start << " " << n;
    }
  }
  // A CRC continued over two parts equals one over the whole.
  EXPECT_EQ(Crc32(Crc32(0, p, 100), p + 100, 200), Crc32(0, p, 300));
}

}  // namespace
}  // namespace ladder
