// The GGUF writer and reader and the F16 / Q8_0 encodings: round trips of
// keys of every type and of F32, F16, BF16 and Q8_0 tensors; the exact bytes
// of small hand-laid-out files; fp16 rounding at every edge (checked against
// every half, and against the compiler's _Float16 where it has one); Q8_0
// blocks as llama.cpp's reference quantizer makes them; and hostile files,
// each refused with InvalidArgument and a message naming the problem, never
// read out of bounds (every prefix of a valid file included).
#include "src/formats/gguf.h"

#include <stdlib.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/core/bf16.h"
#include "src/core/file_util.h"
#include "src/formats/fp16.h"
#include "src/formats/gguf_format.h"

namespace ladder {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Hand layout of GGUF bytes, independent of the writer.

std::string Le32(uint32_t n) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
std::string Le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
std::string F32(float f) { return Le32(std::bit_cast<uint32_t>(f)); }
// A GGUF string: u64 length, then the bytes.
std::string Gstr(const std::string& s) { return Le64(s.size()) + s; }
std::string Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  return std::string("GGUF") + Le32(version) + Le64(n_tensors) + Le64(n_kv);
}
std::string KvU32(const std::string& key, uint32_t v) { return Gstr(key) + Le32(4) + Le32(v); }
std::string Info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                 uint64_t offset) {
  std::string s = Gstr(name) + Le32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) s += Le64(d);
  return s + Le32(type) + Le64(offset);
}
std::string Pad(std::string s, size_t alignment = 32) {
  s.resize((s.size() + alignment - 1) / alignment * alignment, '\0');
  return s;
}

absl::Span<const uint8_t> Bytes(const std::vector<uint8_t>& v) { return absl::MakeConstSpan(v); }

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A fresh directory of this test's own (tests run in parallel).
std::string TempDir() {
  std::string tmpl = ::testing::TempDir() + "/gguf_test.XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

void ExpectRefused(const std::string& file, const std::string& message_part) {
  auto f = GgufFile::Parse(file);
  ASSERT_FALSE(f.ok()) << "accepted a file that should be refused: " << message_part;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(message_part));
  EXPECT_EQ(std::string(f.status().message()).find('\n'), std::string::npos);
}

// ---------------------------------------------------------------------------
// fp16.

TEST(Fp16, EdgeCases) {
  EXPECT_EQ(FloatToFp16(0.0f), 0x0000);
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(FloatToFp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // the tie goes to the even 2^16: inf
  EXPECT_EQ(FloatToFp16(1e9f), 0x7c00);
  EXPECT_EQ(FloatToFp16(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToFp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(FloatToFp16(-std::numeric_limits<float>::quiet_NaN()), 0xfe00);
  EXPECT_EQ(FloatToFp16(std::bit_cast<float>(0x7f800001u)), 0x7e00);  // signalling NaN stays NaN
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);              // the smallest normal
  EXPECT_EQ(FloatToFp16(std::ldexp(1023.0f, -24)), 0x03ff);           // the largest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);              // the smallest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);              // tie to even: 0
  EXPECT_EQ(FloatToFp16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp: tie to even 2
  EXPECT_EQ(FloatToFp16(std::ldexp(5.0f, -25)), 0x0002);     // 2.5 ulp: tie to even 2
  EXPECT_EQ(FloatToFp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToFp16(1e-30f), 0x0000);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even
  EXPECT_EQ(FloatToFp16(2048.0f + 1.0f), 0x6800);                    // 2049: tie to 2048
  EXPECT_EQ(FloatToFp16(2048.0f + 3.0f), 0x6802);                    // 2051: tie to 2052

  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_TRUE(std::signbit(Fp16ToFloat(0x8000)));
  EXPECT_EQ(Fp16ToFloat(0x8000), 0.0f);
  EXPECT_EQ(Fp16ToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7c01)));
}

// Every half widens exactly and narrows back to itself; every midpoint
// between neighbours rounds to the even one, and the floats either side of
// it to the nearer one.
TEST(Fp16, EveryHalfAndEveryMidpoint) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFloat(static_cast<fp16>(h));
    if ((h & 0x7fffu) > 0x7c00u) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(FloatToFp16(f), h) << "half " << h << " = " << f;
  }
  for (uint32_t sign : {0x0000u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7c00u; ++h) {
      const float a = Fp16ToFloat(static_cast<fp16>(sign | h));
      // The next magnitude up; past the largest half, 2^16.
      const float b = h + 1 < 0x7c00u ? Fp16ToFloat(static_cast<fp16>(sign | (h + 1)))
                                      : (sign ? -65536.0f : 65536.0f);
      const float mid = (a + b) / 2;  // exact: halves have 11 significant bits
      const uint32_t even = (h & 1u) ? h + 1 : h;
      ASSERT_EQ(FloatToFp16(mid), sign | even) << "between halves " << h << " and " << h + 1;
      const float toward_a = std::nextafter(mid, a), toward_b = std::nextafter(mid, b);
      ASSERT_EQ(FloatToFp16(toward_a), sign | h) << h;
      ASSERT_EQ(FloatToFp16(toward_b), sign | (h + 1)) << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own float -> _Float16 conversion rounds to nearest even.
TEST(Fp16, AgreesWithTheCompilersFloat16) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    // Exponents around the half range are the interesting ones: keep the
    // sign and mantissa random and put the exponent in [90, 160).
    uint32_t u = bits(rng);
    u = (u & 0x807fffffu) | ((90u + (u >> 23) % 70u) << 23);
    const float f = std::bit_cast<float>(u);
    const _Float16 h = static_cast<_Float16>(f);
    ASSERT_EQ(FloatToFp16(f), std::bit_cast<uint16_t>(h)) << f;
  }
}
#endif

// ---------------------------------------------------------------------------
// Q8_0.

TEST(Q8_0, AllZeroBlockIsAllZeroBytes) {
  auto q = QuantizeQ8_0(std::vector<float>(32, 0.0f));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, std::vector<uint8_t>(34, 0));
  auto back = DequantizeQ8_0(*q);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, std::vector<float>(32, 0.0f));
}

TEST(Q8_0, HandComputedBlock) {
  // x_j = j - 16: amax 16, d = 16/127, id = 127/16 = 7.9375 exactly, so
  // q_j = roundf((j - 16) * 7.9375). fp16(16/127 = 0.1259842...) is
  // 2^-3 * (1 + 8/1024) = 0x3008 (the mantissa 8.06 rounds to 8).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  auto q = QuantizeQ8_0(x);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->size(), 34u);
  EXPECT_EQ((*q)[0], 0x08);
  EXPECT_EQ((*q)[1], 0x30);
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 0]), -127);  // -16 * 7.9375
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 15]), -8);   // -1 * 7.9375 = -7.9375
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 17]), 8);    // 7.9375
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 18]), 16);   // 15.875
  EXPECT_EQ(static_cast<int8_t>((*q)[2 + 31]), 119);  // 15 * 7.9375 = 119.0625
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(static_cast<int8_t>((*q)[2 + j]),
              static_cast<int8_t>(std::roundf(static_cast<float>(j - 16) * 7.9375f)))
        << j;
  }
}

// Every value comes back within half a quantization step of the unrounded
// scale plus what rounding the scale to fp16 moves the largest code (127);
// and dequantized values quantize back to exactly the same bytes.
TEST(Q8_0, RoundTripWithinHalfAStepAndRequantizesExactly) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> x = Random(32 * 64, seed, seed == 3 ? 1e-3f : 0.05f);
    x[5] = 0.0f;
    for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;  // an all-zero block among the rest
    auto q = QuantizeQ8_0(x);
    ASSERT_TRUE(q.ok()) << q.status();
    ASSERT_EQ(q->size(), 64u * 34u);
    auto y = DequantizeQ8_0(*q);
    ASSERT_TRUE(y.ok());
    for (size_t b = 0; b < 64; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / 127.0f;
      fp16 dh;
      std::memcpy(&dh, q->data() + b * 34, 2);
      const float d16 = Fp16ToFloat(dh);
      const float bound = 0.5f * d + 127.0f * std::fabs(d - d16) + 1e-6f * amax;
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(x[b * 32 + j] - (*y)[b * 32 + j]), bound)
            << "seed " << seed << " block " << b << " element " << j;
      }
    }
    auto again = QuantizeQ8_0(*y);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *q) << "seed " << seed;
  }
}

TEST(Q8_0, Refusals) {
  auto odd = QuantizeQ8_0(std::vector<float>(50, 1.0f));
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("multiple of 32"));
  std::vector<float> x(32, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(std::string(QuantizeQ8_0(x).status().message()), HasSubstr("not finite"));
  x[3] = 1e7f;  // d = 1e7 / 127 is past the largest half
  EXPECT_THAT(std::string(QuantizeQ8_0(x).status().message()), HasSubstr("overflows fp16"));
  EXPECT_FALSE(DequantizeQ8_0(std::vector<uint8_t>(35)).ok());
}

// ---------------------------------------------------------------------------
// Encoding tensors.

TEST(GgufEncode, RefusesWithTheTensorsName) {
  auto q = GgufEncode("blk.0.ffn_up.weight", GgmlType::kQ8_0, {50, 2}, std::vector<float>(100));
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("blk.0.ffn_up.weight"));
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("multiple of 32"));
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("ne[0] is 50"));

  auto h = GgufEncode("w", GgmlType::kF16, {2}, std::vector<float>{1.0f, 1e5f});
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("overflows f16"));
  // An infinity stays one (it is not a finite value that overflowed).
  EXPECT_TRUE(GgufEncode("w", GgmlType::kF16, {1},
                         std::vector<float>{std::numeric_limits<float>::infinity()})
                  .ok());

  auto n = GgufEncode("w", GgmlType::kF32, {3}, std::vector<float>(2));
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("holds 3 values, 2 were given"));
  auto t = GgufEncode("w", GgmlType::kQ4_0, {32}, std::vector<float>(32));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("not supported"));
  auto nan8 = GgufEncode("w8", GgmlType::kQ8_0, {32},
                         std::vector<float>(32, std::numeric_limits<float>::quiet_NaN()));
  EXPECT_THAT(std::string(nan8.status().message()), HasSubstr("'w8' (Q8_0): Q8_0: value nan"));
}

// ---------------------------------------------------------------------------
// The exact bytes of written files.

TEST(GgufWriter, ExactBytesOfATinyFile) {
  std::vector<GgufKeyValue> kvs = {{"a", uint32_t{7}}};
  const std::vector<uint8_t> data = FloatBytes({1.0f, 2.0f});
  std::vector<GgufTensor> tensors = {{"t", GgmlType::kF32, {2}, Bytes(data)}};
  auto file = SerializeGguf(kvs, tensors);
  ASSERT_TRUE(file.ok()) << file.status();

  // 24 header + 17 key + 33 tensor info = 74, padded to 96; 8 data bytes
  // padded to 32.
  std::string want = std::string("GGUF") + Le32(3) + Le64(1) + Le64(1);
  want += Le64(1) + "a" + Le32(4) + Le32(7);                      // key "a": u32 7
  want += Le64(1) + "t" + Le32(1) + Le64(2) + Le32(0) + Le64(0);  // "t": 1 dim {2}, F32, @0
  ASSERT_EQ(want.size(), 74u);
  want += std::string(96 - 74, '\0');
  want += F32(1.0f) + F32(2.0f) + std::string(24, '\0');
  ASSERT_EQ(want.size(), 128u);
  EXPECT_EQ(*file, want);
}

TEST(GgufWriter, ExactBytesOfStringsArraysAndTwoTensors) {
  std::vector<GgufKeyValue> kvs = {
      {"general.architecture", std::string("gpt2")},
      {"v", std::vector<int32_t>{1, -1}},
      {"s", std::vector<std::string>{"a b", ""}},
      {"b", true},
  };
  const std::vector<uint8_t> d0 = FloatBytes({1.0f, 2.0f, 3.0f});  // 12 bytes, padded to 32
  std::vector<uint8_t> d1(34, 0);                                  // one Q8_0 block
  d1[0] = 0x00;
  d1[1] = 0x3c;  // d = 1
  d1[2] = 0x05;
  std::vector<GgufTensor> tensors = {
      {"x", GgmlType::kF32, {3, 1}, Bytes(d0)},
      {"q", GgmlType::kQ8_0, {32}, Bytes(d1)},
  };
  auto file = SerializeGguf(kvs, tensors);
  ASSERT_TRUE(file.ok()) << file.status();

  std::string want = Header(3, 2, 4);
  want += Gstr("general.architecture") + Le32(8) + Gstr("gpt2");
  want += Gstr("v") + Le32(9) + Le32(5) + Le64(2) + Le32(1) + Le32(0xffffffffu);
  want += Gstr("s") + Le32(9) + Le32(8) + Le64(2) + Gstr("a b") + Gstr("");
  want += Gstr("b") + Le32(7) + std::string(1, '\1');
  want += Info("x", {3, 1}, 0, 0);
  want += Info("q", {32}, 8, 32);  // x's 12 bytes padded to 32
  want = Pad(want);
  want += Pad(F32(1.0f) + F32(2.0f) + F32(3.0f));
  want += Pad(std::string(reinterpret_cast<const char*>(d1.data()), d1.size()));
  EXPECT_EQ(*file, want);

  auto f = GgufFile::Parse(*file);
  ASSERT_TRUE(f.ok()) << f.status();
  auto q = GgufTensorToFloats(*f->FindTensor("q"));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)[0], 5.0f);
  EXPECT_EQ((*q)[1], 0.0f);
}

TEST(GgufWriter, CustomAlignmentPadsToIt) {
  const std::vector<uint8_t> d = FloatBytes({1.0f});
  std::vector<GgufKeyValue> kvs = {{"general.alignment", uint32_t{64}}};
  std::vector<GgufTensor> tensors = {{"a", GgmlType::kF32, {1}, Bytes(d)},
                                     {"b", GgmlType::kF32, {1}, Bytes(d)}};
  auto file = SerializeGguf(kvs, tensors);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string want = Header(3, 2, 1) + KvU32("general.alignment", 64) + Info("a", {1}, 0, 0) +
                     Info("b", {1}, 0, 64);
  want = Pad(want, 64) + Pad(F32(1.0f), 64) + Pad(F32(1.0f), 64);
  EXPECT_EQ(*file, want);
  auto f = GgufFile::Parse(*file);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->tensors()[1].offset, 64u);
}

TEST(GgufWriter, NoTensorsPadsTheMetadata) {
  auto file = SerializeGguf({{"k", uint8_t{1}}}, {});
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, Pad(Header(3, 0, 1) + Gstr("k") + Le32(0) + std::string(1, '\1')));
  auto f = GgufFile::Parse(*file);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tensors().empty());
  // Without the padding too (the metadata alone is a file gguf.cpp reads).
  auto bare = GgufFile::Parse(Header(3, 0, 1) + Gstr("k") + Le32(0) + std::string(1, '\1'));
  EXPECT_TRUE(bare.ok()) << bare.status();
}

TEST(GgufWriter, Refusals) {
  const std::vector<uint8_t> d = FloatBytes({1.0f, 2.0f});
  auto refused = [](const absl::StatusOr<std::string>& s, const std::string& part) {
    ASSERT_FALSE(s.ok()) << part;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(part));
  };
  refused(SerializeGguf({{"k", true}, {"k", false}}, {}), "key 'k' is given twice");
  refused(SerializeGguf({{"", true}}, {}), "empty");
  refused(SerializeGguf({{"general.alignment", int32_t{32}}}, {}),
          "must be a u32 power of two, not i32");
  refused(SerializeGguf({{"general.alignment", uint32_t{48}}}, {}), "not 48");
  refused(SerializeGguf({{"general.alignment", uint32_t{0}}}, {}), "not 0");
  refused(SerializeGguf(
              {}, {{"t", GgmlType::kF32, {2}, Bytes(d)}, {"t", GgmlType::kF32, {2}, Bytes(d)}}),
          "tensor 't' is given twice");
  refused(SerializeGguf({}, {{std::string(64, 'n'), GgmlType::kF32, {2}, Bytes(d)}}), "too long");
  EXPECT_TRUE(SerializeGguf({}, {{std::string(63, 'n'), GgmlType::kF32, {2}, Bytes(d)}}).ok());
  refused(SerializeGguf({}, {{"", GgmlType::kF32, {2}, Bytes(d)}}), "empty");
  refused(SerializeGguf({}, {{"t", GgmlType::kF32, {3}, Bytes(d)}}),
          "tensor 't': F32 of its shape takes 12 bytes, the data has 8");
  refused(SerializeGguf({}, {{"t", GgmlType::kF32, {}, Bytes(d)}}), "0 dims");
  refused(SerializeGguf({}, {{"t", GgmlType::kF32, {1, 1, 1, 1, 2}, Bytes(d)}}), "5 dims");
  refused(SerializeGguf({}, {{"t", GgmlType::kF32, {-2}, Bytes(d)}}), "negative");
  refused(SerializeGguf({}, {{"t", GgmlType::kQ8_0, {2}, Bytes(d)}}), "ne[0] is 2");
  refused(SerializeGguf({}, {{"t", static_cast<GgmlType>(4), {2}, Bytes(d)}}), "not known");
  refused(
      SerializeGguf({}, {{"t", GgmlType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, Bytes(d)}}),
      "overflows");
}

// ---------------------------------------------------------------------------
// Round trips.

TEST(GgufRoundTrip, KeysOfEveryType) {
  std::vector<GgufKeyValue> kvs = {
      {"u8", uint8_t{200}},
      {"i8", int8_t{-100}},
      {"u16", uint16_t{60000}},
      {"i16", int16_t{-30000}},
      {"u32", uint32_t{4000000000u}},
      {"i32", int32_t{-2000000000}},
      {"f32", 1.5e-5f},
      {"bool", false},
      {"string", std::string("héllo\0world", 12)},
      {"u64", uint64_t{1} << 63},
      {"i64", std::numeric_limits<int64_t>::min()},
      {"f64", 3.141592653589793},
      {"a.u8", std::vector<uint8_t>{0, 255}},
      {"a.i8", std::vector<int8_t>{-128, 127}},
      {"a.u16", std::vector<uint16_t>{1, 65535}},
      {"a.i16", std::vector<int16_t>{-32768}},
      {"a.u32", std::vector<uint32_t>{}},
      {"a.i32", std::vector<int32_t>{1, 3, 6, 1}},
      {"a.f32", std::vector<float>{-0.0f, std::numeric_limits<float>::infinity()}},
      {"a.bool", std::vector<bool>{true, false, true}},
      {"a.string", std::vector<std::string>{"Ġ t", "", std::string(1000, 'x')}},
      {"a.u64", std::vector<uint64_t>{~uint64_t{0}}},
      {"a.i64", std::vector<int64_t>{-1, 1}},
      {"a.f64", std::vector<double>{1e300, -1e-300}},
  };
  ASSERT_EQ(kvs.size(), std::variant_size_v<GgufValue>);
  auto file = SerializeGguf(kvs, {});
  ASSERT_TRUE(file.ok()) << file.status();
  auto f = GgufFile::Parse(*file);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, kvs[i].key);
    EXPECT_EQ(f->metadata()[i].value.index(), kvs[i].value.index()) << kvs[i].key;
    EXPECT_TRUE(f->metadata()[i].value == kvs[i].value) << kvs[i].key;
  }
  ASSERT_NE(f->Get<uint32_t>("u32"), nullptr);
  EXPECT_EQ(*f->Get<uint32_t>("u32"), 4000000000u);
  EXPECT_EQ(f->Get<int32_t>("u32"), nullptr);  // the type must match
  EXPECT_EQ(f->Get<uint32_t>("absent"), nullptr);
  EXPECT_EQ(GgufValueTypeOf(kvs[4].value), GgufValueType::kU32);
  EXPECT_EQ(GgufValueTypeOf(kvs[20].value), GgufValueType::kArray);
  EXPECT_EQ(GgufElementTypeOf(kvs[20].value), GgufValueType::kString);
  EXPECT_EQ(GgufValueTypeString(kvs[17].value), "array of i32");
  EXPECT_EQ(GgufValueTypeString(kvs[9].value), "u64");
}

TEST(GgufRoundTrip, TensorsF32F16Bf16Q8_0) {
  const std::vector<float> emb = Random(64 * 10, 11, 0.02f);  // {64, 10}
  const std::vector<float> w = Random(32 * 3 * 2, 12, 0.5f);  // {32, 3, 2}
  const std::vector<float> bias = Random(10, 13, 3.0f);       // {10}
  const std::vector<float> b16 = Random(7, 14, 100.0f);       // {7}
  auto e = GgufEncode("token_embd.weight", GgmlType::kQ8_0, {64, 10}, emb);
  auto h = GgufEncode("w", GgmlType::kF16, {32, 3, 2}, w);
  auto f32 = GgufEncode("b", GgmlType::kF32, {10}, bias);
  auto bf = GgufEncode("bf", GgmlType::kBF16, {7}, b16);
  ASSERT_TRUE(e.ok() && h.ok() && f32.ok() && bf.ok());
  const std::vector<GgufTensor> tensors = {
      {"token_embd.weight", GgmlType::kQ8_0, {64, 10}, Bytes(*e)},
      {"w", GgmlType::kF16, {32, 3, 2}, Bytes(*h)},
      {"b", GgmlType::kF32, {10}, Bytes(*f32)},
      {"bf", GgmlType::kBF16, {7}, Bytes(*bf)},
      {"empty", GgmlType::kF32, {0, 4}, {}},
  };
  const std::string dir = TempDir();
  const std::string path = dir + "/model.gguf";
  ASSERT_TRUE(WriteGguf(path, {{"general.architecture", std::string("gpt2")}}, tensors).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = GgufFile::Read(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), tensors.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensor& t = f->tensors()[i];
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(t.type, tensors[i].type);
    EXPECT_EQ(t.ne, tensors[i].ne);
    EXPECT_EQ(t.offset, offset);
    EXPECT_EQ(t.offset % 32, 0u);
    ASSERT_EQ(t.data.size(), tensors[i].data.size());
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), tensors[i].data.begin()));
    offset += (t.data.size() + 31) / 32 * 32;
  }
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), f->data_offset() + offset);

  auto emb_back = GgufTensorToFloats(*f->FindTensor("token_embd.weight"));
  ASSERT_TRUE(emb_back.ok());
  auto expect_q8 = DequantizeQ8_0(*e);
  EXPECT_EQ(*emb_back, *expect_q8);
  auto w_back = GgufTensorToFloats(*f->FindTensor("w"));
  ASSERT_TRUE(w_back.ok());
  for (size_t i = 0; i < w.size(); ++i) {
    // Half an ulp of fp16: 2^-11 relative for normals, 2^-25 below them.
    const float tol = std::max(std::fabs(w[i]) * std::ldexp(1.0f, -11), std::ldexp(1.0f, -25));
    ASSERT_LE(std::fabs((*w_back)[i] - w[i]), tol) << i;
  }
  auto b_back = GgufTensorToFloats(*f->FindTensor("b"));
  EXPECT_EQ(*b_back, bias);
  auto bf_back = GgufTensorToFloats(*f->FindTensor("bf"));
  for (size_t i = 0; i < b16.size(); ++i)
    EXPECT_EQ((*bf_back)[i], Bf16ToFloat(FloatToBf16(b16[i])));
  EXPECT_TRUE(GgufTensorToFloats(*f->FindTensor("empty"))->empty());
  EXPECT_EQ(f->FindTensor("absent"), nullptr);
  std::filesystem::remove_all(dir);
}

TEST(GgufRoundTrip, AFailedWriteLeavesNoFile) {
  const std::string dir = TempDir();
  const std::string path = dir + "/model.gguf";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const std::vector<uint8_t> d = FloatBytes({1.0f});
  // A refused tensor: nothing is written, the old file stays.
  EXPECT_FALSE(WriteGguf(path, {}, {{"t", GgmlType::kF32, {2}, Bytes(d)}}).ok());
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // An unwritable place: an error, no file.
  EXPECT_FALSE(WriteGguf(dir + "/no/such/dir/m.gguf", {}, {}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/no"));
  auto missing = GgufFile::Read(dir + "/absent.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(GgufNames, Gpt2KeysAndTensorNames) {
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufContextLength), "gpt2.context_length");
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufEmbeddingLength), "gpt2.embedding_length");
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufFeedForwardLength), "gpt2.feed_forward_length");
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufBlockCount), "gpt2.block_count");
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufHeadCount), "gpt2.attention.head_count");
  EXPECT_EQ(GgufArchKey(kGpt2Arch, kGgufLayerNormEpsilon), "gpt2.attention.layer_norm_epsilon");
  EXPECT_EQ(GgufTensorName(kGgufTokenEmbd, kGgufWeight), "token_embd.weight");
  EXPECT_EQ(GgufTensorName(kGgufPosEmbd, kGgufWeight), "position_embd.weight");
  EXPECT_EQ(GgufTensorName(kGgufOutputNorm, kGgufBias), "output_norm.bias");
  EXPECT_EQ(GgufTensorName(kGgufOutput, kGgufWeight), "output.weight");
  EXPECT_EQ(GgufBlockTensorName(0, kGgufAttnNorm, kGgufWeight), "blk.0.attn_norm.weight");
  EXPECT_EQ(GgufBlockTensorName(11, kGgufAttnQkv, kGgufBias), "blk.11.attn_qkv.bias");
  EXPECT_EQ(GgufBlockTensorName(3, kGgufAttnOutput, kGgufWeight), "blk.3.attn_output.weight");
  EXPECT_EQ(GgufBlockTensorName(3, kGgufFfnNorm, kGgufBias), "blk.3.ffn_norm.bias");
  EXPECT_EQ(GgufBlockTensorName(3, kGgufFfnUp, kGgufWeight), "blk.3.ffn_up.weight");
  EXPECT_EQ(GgufBlockTensorName(3, kGgufFfnDown, kGgufBias), "blk.3.ffn_down.bias");
  EXPECT_EQ(GgmlTypeInfoOf(GgmlType::kQ8_0)->block_bytes, kQ8_0BlockBytes);
  EXPECT_EQ(GgmlTypeInfoOf(GgmlType::kQ8_0)->block_elems, kQ8_0BlockElems);
  EXPECT_FALSE(GgmlTypeInfoOf(static_cast<GgmlType>(31)).has_value());
}

TEST(GgufNames, Gpt2TensorList) {
  const auto specs = Gpt2GgufTensors(/*n_vocab=*/50257, /*n_ctx=*/1024, /*n_embd=*/768,
                                     /*n_ff=*/3072, /*n_layer=*/2, /*separate_output=*/false);
  ASSERT_EQ(specs.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(specs[0].name, "token_embd.weight");
  EXPECT_EQ(specs[0].ne, (std::vector<int64_t>{768, 50257}));
  EXPECT_FALSE(specs[0].keep_f32);
  EXPECT_EQ(specs[1].name, "position_embd.weight");
  EXPECT_EQ(specs[1].ne, (std::vector<int64_t>{768, 1024}));
  EXPECT_TRUE(specs[1].keep_f32);
  EXPECT_EQ(specs[2].name, "blk.0.attn_norm.weight");
  EXPECT_TRUE(specs[2].keep_f32);
  EXPECT_EQ(specs[4].name, "blk.0.attn_qkv.weight");
  EXPECT_EQ(specs[4].ne, (std::vector<int64_t>{768, 2304}));
  EXPECT_FALSE(specs[4].keep_f32);
  EXPECT_EQ(specs[5].name, "blk.0.attn_qkv.bias");
  EXPECT_EQ(specs[5].ne, (std::vector<int64_t>{2304}));
  EXPECT_TRUE(specs[5].keep_f32);
  EXPECT_EQ(specs[10].name, "blk.0.ffn_up.weight");
  EXPECT_EQ(specs[10].ne, (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(specs[12].name, "blk.0.ffn_down.weight");
  EXPECT_EQ(specs[12].ne, (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(specs[13].name, "blk.0.ffn_down.bias");
  EXPECT_EQ(specs[13].ne, (std::vector<int64_t>{768}));
  EXPECT_EQ(specs[14].name, "blk.1.attn_norm.weight");
  EXPECT_EQ(specs.back().name, "output_norm.bias");
  const auto tied = Gpt2GgufTensors(10, 8, 32, 128, 1, /*separate_output=*/true);
  EXPECT_EQ(tied.back().name, "output.weight");
  EXPECT_EQ(tied.back().ne, (std::vector<int64_t>{32, 10}));
}

// ---------------------------------------------------------------------------
// Hostile files.

// A valid file of two keys and two tensors, laid out by hand: key "a" (u32),
// key "b" (string), tensor "t" F32 {2} at 0 and tensor "u" F32 {2} at 32.
std::string ValidFile(const std::string& second_key = "b", const std::string& second_tensor = "u") {
  std::string s = Header(3, 2, 2) + KvU32("a", 1) + Gstr(second_key) + Le32(8) + Gstr("xyz") +
                  Info("t", {2}, 0, 0) + Info(second_tensor, {2}, 0, 32);
  return Pad(s) + Pad(F32(1) + F32(2)) + Pad(F32(3) + F32(4));
}

TEST(GgufReader, TheHandMadeFileParses) {
  auto f = GgufFile::Parse(ValidFile());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f->Get<std::string>("b"), "xyz");
  EXPECT_EQ(*GgufTensorToFloats(*f->FindTensor("u")), (std::vector<float>{3, 4}));
}

TEST(GgufReader, EveryTruncationIsRefused) {
  const std::string file = ValidFile();
  for (size_t n = 0; n < file.size(); ++n) {
    auto f = GgufFile::Parse(file.substr(0, n));
    ASSERT_FALSE(f.ok()) << "a prefix of " << n << " bytes was accepted";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  }
  ExpectRefused(ValidFile() + "x", "1 bytes after the end of the data");
  ExpectRefused("", "too short for the magic");
}

TEST(GgufReader, BadHeaders) {
  std::string file = ValidFile();
  ExpectRefused("GGUG" + file.substr(4), "magic");
  ExpectRefused(file.substr(0, 4) + Le32(2) + file.substr(8), "version 2 is not supported");
  ExpectRefused(file.substr(0, 4) + Le32(1) + file.substr(8), "version 1");
  ExpectRefused(Header(3, 0, uint64_t{1} << 62), "key count 4611686018427387904 cannot fit");
  ExpectRefused(Header(3, uint64_t{1} << 62, 0), "tensor count");
  ExpectRefused(Header(3, ~uint64_t{0}, ~uint64_t{0}), "cannot fit");
  // A count the rest of the file cannot hold, though it is small.
  ExpectRefused(Header(3, 0, 3) + KvU32("a", 1) + KvU32("b", 1), "key count 3 cannot fit");
  // Counts that pass that bound, with the file ending inside the last value.
  ExpectRefused(Header(3, 0, 2) + KvU32("a", 1) + Gstr("b") + Le32(4) + "x", "key 'b': file ends");
}

TEST(GgufReader, BadKeysAndValues) {
  const std::string h = Header(3, 0, 1);
  const std::string tail(16, 'z');  // enough bytes that the key count fits
  ExpectRefused(h + Le64(1000) + tail, "key 0: string length 1000 runs past the end");
  ExpectRefused(h + Le64(uint64_t{1} << 40) + tail, "key 0: string length 1099511627776 is over");
  ExpectRefused(h + Le64(~uint64_t{0}) + tail, "over the limit");
  ExpectRefused(h + Gstr("") + Le32(4) + Le32(1), "key 0 is empty");
  ExpectRefused(h + Gstr("k") + Le32(13) + Le32(1), "key 'k': value type 13 is not a GGUF type");
  ExpectRefused(h + Gstr("k") + Le32(0xffffffffu) + Le32(1), "key 'k': value type 4294967295");
  ExpectRefused(h + Gstr("k") + Le32(9) + Le32(9) + Le64(1), "key 'k': arrays of arrays");
  ExpectRefused(h + Gstr("k") + Le32(7) + std::string(1, '\2'), "key 'k': bool byte 2");
  ExpectRefused(h + Gstr("k") + Le32(8) + Le64(50) + "abc", "key 'k': string length 50 runs past");
  ExpectRefused(h + Gstr("k") + Le32(9) + Le32(4) + Le64(uint64_t{1} << 40), "key 'k': array of");
  ExpectRefused(h + Gstr("k") + Le32(9) + Le32(4) + Le64(1000) + Le32(1),
                "key 'k': array of 1000 u32 needs at least 4000 bytes");
  ExpectRefused(h + Gstr("k") + Le32(9) + Le32(8) + Le64(1000) + Gstr("a"),
                "array of 1000 string needs at least 8000 bytes");
  ExpectRefused(h + Gstr("k") + Le32(9) + Le32(8) + Le64(2) + Gstr("a") + Le64(99) + "b",
                "key 'k': string length 99 runs past");
  ExpectRefused(h + Gstr("k") + Le32(4) + "ab", "key 'k': file ends");
  ExpectRefused(Header(3, 0, 2) + KvU32("a", 1) + KvU32("a", 2), "key 'a' appears twice");
  ExpectRefused(ValidFile("a"), "key 'a' appears twice");
  ExpectRefused(Header(3, 0, 1) + Gstr("general.alignment") + Le32(5) + Le32(32),
                "'general.alignment' is i32, must be u32");
  ExpectRefused(Header(3, 0, 1) + KvU32("general.alignment", 24), "is 24, not a power of two");
  ExpectRefused(Header(3, 0, 1) + KvU32("general.alignment", 0), "is 0, not a power of two");
}

TEST(GgufReader, BadTensorInfos) {
  auto one = [](const std::string& info, const std::string& data) {
    return Pad(Header(3, 1, 0) + info) + data;
  };
  const std::string d2 = Pad(F32(1) + F32(2));
  EXPECT_TRUE(GgufFile::Parse(one(Info("t", {2}, 0, 0), d2)).ok());
  ExpectRefused(one(Info("t", {1, 1, 1, 1, 2}, 0, 0), d2), "tensor 't': n_dims 5");
  ExpectRefused(one(Gstr("t") + Le32(0) + Le32(0) + Le64(0), d2), "tensor 't': n_dims 0");
  ExpectRefused(one(Gstr("t") + Le32(0xffffffffu) + Le64(2) + Le32(0) + Le64(0), d2),
                "n_dims 4294967295");
  ExpectRefused(one(Info("", {2}, 0, 0), d2), "tensor 0 has an empty name");
  ExpectRefused(one(Info(std::string(64, 'n'), {2}, 0, 0), d2), "name of 64 bytes is too long");
  EXPECT_TRUE(GgufFile::Parse(one(Info(std::string(63, 'n'), {2}, 0, 0), d2)).ok());
  ExpectRefused(one(Info("t", {uint64_t{1} << 63}, 0, 0), d2), "tensor 't': ne[0]");
  ExpectRefused(one(Info("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0), d2),
                "tensor 't': its element count overflows");
  ExpectRefused(one(Info("t", {uint64_t{1} << 62}, 0, 0), d2),
                "tensor 't': its byte count overflows");
  ExpectRefused(one(Info("t", {2}, 4, 0), d2), "tensor 't': ggml type 4 is not known");
  ExpectRefused(one(Info("t", {2}, 40, 0), d2), "ggml type 40 is not known");
  ExpectRefused(one(Info("t", {2}, 8, 0), d2), "tensor 't': Q8_0 needs rows of a multiple of 32");
  ExpectRefused(one(Info("t", {2}, 0, 4), d2), "tensor 't': offset 4 is not 0");    // misaligned
  ExpectRefused(one(Info("t", {2}, 0, 32), d2), "tensor 't': offset 32 is not 0");  // past the end
  ExpectRefused(one(Info("t", {2}, 0, ~uint64_t{0}), d2), "offset 18446744073709551615");
  ExpectRefused(one(Info("t", {1000}, 0, 0), d2),
                "tensor 't': its 4000 bytes at offset 0 run past");
  ExpectRefused(one(Info("t", {2}, 0, 0), ""), "tensor 't': its 8 bytes");
  ExpectRefused(one(Info("t", {2}, 0, 0), F32(1) + F32(2)), "inside the padding after tensor 't'");
  ExpectRefused(Header(3, 1, 0) + Info("t", {2}, 0, 0), "past the end of the file");
  // The second tensor must follow the first, padded.
  std::string two = Pad(Header(3, 2, 0) + Info("t", {2}, 0, 0) + Info("u", {2}, 0, 8)) + d2 + d2;
  ExpectRefused(two, "tensor 'u': offset 8 is not 32");
  two = Pad(Header(3, 2, 0) + Info("t", {2}, 0, 0) + Info("u", {2}, 0, 0)) + d2 + d2;
  ExpectRefused(two, "tensor 'u': offset 0 is not 32");  // overlapping
  ExpectRefused(ValidFile("b", "t"), "tensor 't' appears twice");
}

// Random corruption of a valid file is refused or parsed, never a crash, and
// what parses has every tensor inside the file.
TEST(GgufReader, RandomCorruptionNeverCrashes) {
  const std::string file = ValidFile();
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    std::string bad = file;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    auto f = GgufFile::Parse(bad);
    if (f.ok()) {
      for (const GgufTensor& t : f->tensors()) {
        ASSERT_LE(f->data_offset() + t.offset + t.data.size(), bad.size()) << t.name;
        ASSERT_EQ(static_cast<int64_t>(t.data.size()), *GgufTensorBytes(t.name, t.type, t.ne));
      }
    } else {
      EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace ladder
