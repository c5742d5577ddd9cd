// The safetensors reader and writer: round trips of every dtype, scalars,
// empty tensors and metadata; the exact bytes of a written file; files as
// the Python library writes them; and hostile headers, each refused with
// InvalidArgument and a message naming the problem, never read out of bounds.
#include "src/formats/safetensors.h"

#include <stdlib.h>
#include <unistd.h>

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
#include "src/core/file_util.h"

namespace ladder {
namespace {

using ::testing::HasSubstr;

std::string Le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file of `header` (taken as is) and `data_bytes` bytes of data.
std::string File(const std::string& header, size_t data_bytes) {
  return Le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string Str(absl::Span<const uint8_t> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A fresh directory of this test's own (tests run in parallel).
std::string TempDir() {
  std::string tmpl = ::testing::TempDir() + "/safetensors_test.XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(SafetensorsTest, DTypeTable) {
  EXPECT_EQ(SafeDTypeFromName("BF16"), SafeDType::kBF16);
  EXPECT_EQ(SafeDTypeFromName("I64"), SafeDType::kI64);
  EXPECT_EQ(SafeDTypeFromName("bf16"), std::nullopt);
  EXPECT_EQ(SafeDTypeFromName("F4"), std::nullopt);
  for (const SafeDTypeInfo& info : kSafeDTypes) {
    EXPECT_EQ(SafeDTypeFromName(info.name), info.dtype);
    EXPECT_EQ(SafeDTypeBytes(info.dtype), info.bytes);
  }
}

TEST(SafetensorsTest, RoundTripOfEveryDTypeScalarsEmptyTensorsAndMetadata) {
  std::mt19937 rng(7);
  struct Spec {
    std::string name;
    SafeDType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"wte.weight", SafeDType::kF32, {5, 3}},
      {"h.0.ln_1.weight", SafeDType::kF16, {7}},
      {"h.0.attn.c_attn.weight", SafeDType::kBF16, {3, 2, 2}},
      {"scalar", SafeDType::kF32, {}},
      {"empty", SafeDType::kF32, {0, 4}},
      {"empty too", SafeDType::kBF16, {3, 0}},
      {"h.0.attn.bias", SafeDType::kBool, {1, 1, 2, 2}},
      {"u8", SafeDType::kU8, {3}},
      {"i8", SafeDType::kI8, {2}},
      {"i16", SafeDType::kI16, {2}},
      {"u16", SafeDType::kU16, {1}},
      {"i32", SafeDType::kI32, {3}},
      {"u32", SafeDType::kU32, {2}},
      {"f64", SafeDType::kF64, {2}},
      {"i64", SafeDType::kI64, {}},
      {"u64", SafeDType::kU64, {2}},
      {"f8", SafeDType::kF8E4M3, {3}},
      {"unicode \xc3\xa9 \"quoted\" \\", SafeDType::kF32, {1}},
  };
  std::vector<std::string> storage;
  storage.reserve(specs.size());
  std::vector<SafetensorsTensor> tensors;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::string bytes(static_cast<size_t>(n * SafeDTypeBytes(s.dtype)), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    storage.push_back(bytes);
    tensors.push_back({s.name, s.dtype, s.shape, Bytes(storage.back())});
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "line\nbreak"}};
  absl::StatusOr<std::string> file = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(file.ok()) << file.status();
  // The data section starts aligned.
  uint64_t n = 0;
  std::memcpy(&n, file->data(), 8);
  EXPECT_EQ(n % 8, 0u);

  absl::StatusOr<SafetensorsFile> back = SafetensorsFile::Parse(*file);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata(), metadata);
  ASSERT_EQ(back->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor* t = back->Find(tensors[i].name);
    ASSERT_NE(t, nullptr) << tensors[i].name;
    EXPECT_EQ(t->dtype, tensors[i].dtype) << t->name;
    EXPECT_EQ(t->shape, tensors[i].shape) << t->name;
    EXPECT_EQ(Str(t->bytes), storage[i]) << t->name;
    EXPECT_EQ(t->numel(), tensors[i].numel()) << t->name;
  }
  EXPECT_EQ(back->Find("nope"), nullptr);
  // Moving the file keeps its tensors' bytes where they were.
  const uint8_t* before = back->Find("wte.weight")->bytes.data();
  SafetensorsFile moved = std::move(back).value();
  EXPECT_EQ(moved.Find("wte.weight")->bytes.data(), before);
  // Written again in data order, the file is the same bytes.
  absl::StatusOr<std::string> again = SerializeSafetensors(moved.tensors(), moved.metadata());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *file);
}

TEST(SafetensorsTest, WrittenBytesAreTheFormatByHand) {
  const std::string a = std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f
  const std::string b = "\x01\x02\x03";
  absl::StatusOr<std::string> file = SerializeSafetensors(
      {{"a", SafeDType::kF32, {2}, Bytes(a)}, {"b", SafeDType::kU8, {3}, Bytes(b)}},
      {{"format", "pt"}});
  ASSERT_TRUE(file.ok()) << file.status();
  // 138 bytes of JSON, padded with 6 spaces to 144 = 0x90.
  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  ASSERT_EQ(json.size(), 138u);
  const std::string expected = std::string("\x90\0\0\0\0\0\0\0", 8) + json + "      " + a + b;
  EXPECT_EQ(*file, expected);

  absl::StatusOr<SafetensorsFile> back = SafetensorsFile::Parse(expected);
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<std::vector<float>> floats = SafetensorsToFloats(*back->Find("a"));
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_EQ(*floats, (std::vector<float>{1.0f, -2.0f}));
}

// Files as the Python `safetensors` library writes them: its header is
// serde_json's compact output ("__metadata__" first, then the tensors
// sorted by decreasing dtype alignment, then by name; keys dtype, shape,
// data_offsets), padded with spaces to a multiple of 8 (older versions did
// not pad). Our writer, given the same order, writes the same bytes.
TEST(SafetensorsTest, FilesOfThePythonLibrary) {
  std::string f32s;  // 0, 1, 2, 3, 4, 5 as little-endian floats
  for (float v : {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) {
    uint32_t u = std::bit_cast<uint32_t>(v);
    for (int i = 0; i < 4; ++i) f32s += static_cast<char>((u >> (8 * i)) & 0xff);
  }
  struct Case {
    std::string file;
    std::vector<SafetensorsTensor> tensors;
    std::map<std::string, std::string> metadata;
  };
  const std::vector<Case> cases = {
      // 72 bytes: 65 of JSON, 7 spaces.
      {std::string("\x48\0\0\0\0\0\0\0", 8) +
           R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " +
           f32s,
       {{"attn0", SafeDType::kF32, {1, 1, 2, 3}, Bytes(f32s)}},
       {}},
      // 64 bytes of JSON: no padding needed.
      {std::string("\x40\0\0\0\0\0\0\0", 8) +
           R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + f32s,
       {{"attn.0", SafeDType::kF32, {1, 2, 3}, Bytes(f32s)}},
       {}},
      // No tensors.
      {std::string("\x08\0\0\0\0\0\0\0", 8) + "{}      ", {}, {}},
      {std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ",
       {},
       {{"framework", "pt"}}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> written = SerializeSafetensors(c.tensors, c.metadata);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(*written, c.file);
    absl::StatusOr<SafetensorsFile> back = SafetensorsFile::Parse(c.file);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->metadata(), c.metadata);
    ASSERT_EQ(back->tensors().size(), c.tensors.size());
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      EXPECT_EQ(back->tensors()[i].name, c.tensors[i].name);
      EXPECT_EQ(back->tensors()[i].shape, c.tensors[i].shape);
      EXPECT_EQ(Str(back->tensors()[i].bytes), Str(c.tensors[i].bytes));
    }
  }
}

TEST(SafetensorsTest, HeaderOrderIsNotDataOrder) {
  // Entries listed in any order, zero-size tensors at a boundary, even two at
  // the same offset: the reader orders by offset.
  const std::string file = File(R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                R"("e1":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                                R"("e2":{"dtype":"I64","shape":[5,0],"data_offsets":[2,2]},)"
                                R"("a":{"dtype":"U16","shape":[],"data_offsets":[2,4]}}  )",
                                4);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(file);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "z");
  EXPECT_EQ(f->tensors()[3].name, "a");
  EXPECT_EQ(f->Find("e2")->bytes.size(), 0u);
  EXPECT_EQ(f->Find("a")->numel(), 1);
}

struct Hostile {
  const char* what;
  std::string file;
  std::string message;  // a substring of the error
};

std::string Entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return absl::StrCat(R"({"dtype":)", dtype, R"(,"shape":)", shape, R"(,"data_offsets":)", offsets,
                      "}");
}

TEST(SafetensorsTest, HostileFilesAreRefused) {
  const std::string f2 = Entry(R"("F32")", "[2]", "[0,8]");
  const std::vector<Hostile> cases = {
      {"shorter than the length", "abc", "3 bytes, too short for the 8-byte header length"},
      {"empty", "", "0 bytes, too short"},
      {"header length past the end", Le64(1000) + "{}", "header length 1000 runs past the end"},
      {"header length over the limit", Le64(100'000'001) + "{}", "over the limit of 100000000"},
      {"header length 2^64-1", Le64(~uint64_t{0}) + "{}", "over the limit"},
      {"header length 0", Le64(0), "does not start with '{'"},
      {"not an object", File("[]", 0), "does not start with '{'"},
      {"leading space", File(" {}", 0), "does not start with '{'"},
      {"not JSON", File(R"({"a":)", 0), "not valid JSON"},
      {"trailing garbage", File("{} x", 0), "not valid JSON"},
      {"not UTF-8", File("{\"\xff\":{}}", 0), "not valid JSON"},
      {"overlap",
       File(absl::StrCat(R"({"a":)", f2, R"(,"b":)", Entry(R"("F32")", "[2]", "[4,12]"), "}"), 12),
       "tensor 'b': data_offsets [4, 12) overlap those of tensor 'a', [0, 8)"},
      {"zero-size inside another",
       File(absl::StrCat(R"({"a":)", f2, R"(,"b":)", Entry(R"("F32")", "[0]", "[4,4]"), "}"), 8),
       "tensor 'b': data_offsets [4, 4) overlap"},
      {"same range twice", File(absl::StrCat(R"({"a":)", f2, R"(,"b":)", f2, "}"), 8), "overlap"},
      {"hole",
       File(absl::StrCat(R"({"a":)", f2, R"(,"b":)", Entry(R"("F32")", "[2]", "[12,20]"), "}"), 20),
       "bytes [8, 12) of the data section belong to no tensor (a hole before tensor 'b')"},
      {"hole at the start",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[2]", "[4,12]"), "}"), 12),
       "bytes [0, 4) of the data section belong to no tensor"},
      {"trailing data", File(absl::StrCat(R"({"a":)", f2, "}"), 12),
       "bytes [8, 12) at the end of the data section belong to no tensor"},
      {"data but no tensors", File("{}", 1), "bytes [0, 1) at the end"},
      {"past the end", File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[4]", "[0,16]"), "}"), 8),
       "tensor 'a': data_offsets [0, 16) run past the end of the data section (8 bytes)"},
      {"offset near 2^64",
       File(absl::StrCat(R"({"a":)",
                         Entry(R"("F32")", "[0]", "[18446744073709551615,18446744073709551615]"),
                         "}"),
            0),
       "data_offsets[0] = 18446744073709551615 is too large"},
      {"end before begin",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[2]", "[8,0]"), "}"), 8),
       "tensor 'a': data_offsets [8, 0) end before they begin"},
      {"size mismatch",
       File(
           absl::StrCat(R"({"h.0.attn.c_attn.weight":)", Entry(R"("F32")", "[4,8]", "[0,96]"), "}"),
           96),
       "safetensors: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 96) but F32 [4, 8] needs "
       "128 bytes"},
      {"huge shape",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[4294967296,4294967296]", "[0,0]"), "}"),
            0),
       "tensor 'a': shape [4294967296, 4294967296] overflows 64-bit sizes"},
      {"huge shape with a zero",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[0,4294967296,4294967296]", "[0,0]"), "}"),
            0),
       "overflows 64-bit sizes"},
      {"huge byte count",
       File(absl::StrCat(R"({"a":)", Entry(R"("F64")", "[2305843009213693952]", "[0,0]"), "}"), 0),
       "tensor 'a': F64 [2305843009213693952] overflows 64-bit sizes"},
      {"dim over int64",
       File(absl::StrCat(R"({"a":)", Entry(R"("U8")", "[9223372036854775808]", "[0,0]"), "}"), 0),
       "shape[0] = 9223372036854775808 is too large"},
      {"dim over uint64",
       File(absl::StrCat(R"({"a":)", Entry(R"("U8")", "[99999999999999999999]", "[0,0]"), "}"), 0),
       "shape[0] is not an integer"},
      {"negative dim", File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[2,-1]", "[0,0]"), "}"), 0),
       "tensor 'a': shape[1] is negative (-1)"},
      {"negative offset",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[0]", "[-8,0]"), "}"), 0),
       "data_offsets[0] is negative (-8)"},
      {"fractional dim",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[1.5]", "[0,0]"), "}"), 0),
       "shape[0] is not an integer"},
      {"shape not an array",
       File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "4", "[0,16]"), "}"), 16),
       "tensor 'a': shape is not an array of integers"},
      {"three offsets", File(absl::StrCat(R"({"a":)", Entry(R"("F32")", "[2]", "[0,8,8]"), "}"), 8),
       "data_offsets is not an array of 2 integers"},
      {"bad dtype", File(absl::StrCat(R"({"a":)", Entry(R"("F33")", "[2]", "[0,8]"), "}"), 8),
       "tensor 'a': unknown dtype 'F33'"},
      {"lower-case dtype",
       File(absl::StrCat(R"({"a":)", Entry(R"("f32")", "[2]", "[0,8]"), "}"), 8),
       "unknown dtype 'f32'"},
      {"sub-byte dtype", File(absl::StrCat(R"({"a":)", Entry(R"("F4")", "[2]", "[0,1]"), "}"), 1),
       "unknown dtype 'F4'"},
      {"dtype not a string", File(absl::StrCat(R"({"a":)", Entry("4", "[2]", "[0,8]"), "}"), 8),
       "tensor 'a': dtype is not a string"},
      {"duplicate names", File(absl::StrCat(R"({"a":)", f2, R"(,"a":)", f2, "}"), 8),
       "tensor 'a' appears twice"},
      {"duplicate names apart",
       File(absl::StrCat(R"({"a":)", f2, R"(,"b":)", Entry(R"("F32")", "[0]", "[8,8]"), R"(,"a":)",
                         f2, "}"),
            8),
       "tensor 'a' appears twice"},
      {"duplicate key in an entry",
       File(R"({"a":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': key 'dtype' appears twice"},
      {"duplicate metadata", File(R"({"__metadata__":{"k":"1","k":"2"}})", 0),
       "__metadata__ key 'k' appears twice"},
      {"metadata twice", File(R"({"__metadata__":{},"__metadata__":{}})", 0),
       "__metadata__ appears twice"},
      {"non-string metadata", File(R"({"__metadata__":{"k":1}})", 0),
       "__metadata__ 'k' is not a string"},
      {"metadata not an object", File(R"({"__metadata__":["k"]})", 0),
       "__metadata__ is not an object"},
      {"entry not an object", File(R"({"a":3})", 0), "tensor 'a': the entry is not an object"},
      {"missing key", File(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
       "tensor 'a': no \"data_offsets\""},
      {"extra key", File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
       "tensor 'a': unexpected key 'x'"},
      {"nested too deep", File(R"({"a":{"shape":[[[1]]]}})", 0), "nests deeper"},
      {"deep nesting",
       File("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0),
       "nests deeper"},
      {"name with a newline",
       File(absl::StrCat(R"({"a\nb":)", Entry(R"("F33")", "[2]", "[0,8]"), "}"), 8),
       "tensor 'a\\nb': unknown dtype"},
  };
  for (const Hostile& c : cases) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(c.file);
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << f.status();
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.message)) << c.what;
    EXPECT_EQ(std::string(f.status().message()).find('\n'), std::string::npos) << c.what;
  }
}

TEST(SafetensorsTest, EveryTruncationAndRandomDamageIsRefusedOrInBounds) {
  const std::string a(32, '\1'), b(32, '\2');
  const std::string file = *SerializeSafetensors(
      {{"a", SafeDType::kF32, {4, 2}, Bytes(a)}, {"b", SafeDType::kBF16, {16}, Bytes(b)}},
      {{"format", "pt"}});
  for (size_t n = 0; n < file.size(); ++n) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(file.substr(0, n));
    ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << "length " << n;
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string damaged = file;
    for (int k = 0; k < 1 + i % 3; ++k) damaged[rng() % damaged.size()] ^= 1 << (rng() % 8);
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(damaged);
    if (!f.ok()) {
      ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    // What is accepted lies inside the file and matches its shape.
    const uint8_t* lo = nullptr;
    for (const SafetensorsTensor& t : f->tensors()) {
      EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.numel() * SafeDTypeBytes(t.dtype)));
      if (lo != nullptr) {
        EXPECT_GE(t.bytes.data(), lo);
      }
      lo = t.bytes.data() + t.bytes.size();
    }
  }
}

TEST(SafetensorsTest, WriterRefusesWhatItCannotWrite) {
  const std::string eight(8, '\0');
  struct Case {
    const char* what;
    std::vector<SafetensorsTensor> tensors;
    std::map<std::string, std::string> metadata;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"duplicate",
       {{"a", SafeDType::kF32, {2}, Bytes(eight)}, {"a", SafeDType::kU8, {8}, Bytes(eight)}},
       {},
       "tensor 'a': the name appears twice"},
      {"reserved", {{"__metadata__", SafeDType::kF32, {2}, Bytes(eight)}}, {}, "reserved"},
      {"wrong size",
       {{"a", SafeDType::kF32, {3}, Bytes(eight)}},
       {},
       "tensor 'a': F32 [3] needs 12 bytes, given 8"},
      {"negative dim", {{"a", SafeDType::kF32, {-2}, Bytes(eight)}}, {}, "shape[0] is negative"},
      {"overflow",
       {{"a", SafeDType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, Bytes(eight)}},
       {},
       "overflows"},
      {"name not UTF-8", {{"\xff", SafeDType::kF32, {2}, Bytes(eight)}}, {}, "not valid UTF-8"},
      {"metadata not UTF-8", {}, {{"k", "\xc3"}}, "__metadata__ 'k' is not valid UTF-8"},
  };
  const std::string dir = TempDir();
  for (const Case& c : cases) {
    absl::StatusOr<std::string> s = SerializeSafetensors(c.tensors, c.metadata);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message)) << c.what;
    const std::string path = dir + "/refused.safetensors";
    EXPECT_FALSE(WriteSafetensors(path, c.tensors, c.metadata).ok()) << c.what;
    EXPECT_FALSE(std::filesystem::exists(path)) << c.what;
  }
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsTest, WriteAndReadAFile) {
  const std::string dir = TempDir();
  const std::string path = dir + "/model.safetensors";
  std::vector<float> w = {0.5f, -1.25f, 3.0f};
  const std::vector<SafetensorsTensor> tensors = {
      {"w",
       SafeDType::kF32,
       {3},
       absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Read(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(*SafetensorsToFloats(*f->Find("w")), w);
  // Overwriting replaces the file whole; no temporary file is left.
  ASSERT_TRUE(WriteSafetensors(path, {}, {}).ok());
  ASSERT_TRUE(SafetensorsFile::Read(path).ok());
  EXPECT_TRUE(SafetensorsFile::Read(path)->tensors().empty());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // A damaged file: the error names the path.
  ASSERT_TRUE(WriteFileAtomically(path, "\x02\0\0\0\0\0\0\0[]").ok());
  absl::StatusOr<SafetensorsFile> bad = SafetensorsFile::Read(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path + ": safetensors: "));

  EXPECT_EQ(SafetensorsFile::Read(dir + "/missing.safetensors").status().code(),
            absl::StatusCode::kNotFound);

  // Writing into a directory that does not exist fails and leaves nothing.
  const std::string nowhere = dir + "/no/such/dir/model.safetensors";
  EXPECT_FALSE(WriteSafetensors(nowhere, tensors, {}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/no"));
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsTest, FloatsOfHalfAndBfloat16) {
  auto le16 = [](std::vector<uint16_t> v) {
    std::string s;
    for (uint16_t u : v) {
      s += static_cast<char>(u & 0xff);
      s += static_cast<char>(u >> 8);
    }
    return s;
  };
  const std::string half = le16({0x3c00, 0xc000, 0x7bff, 0x0001, 0x8400, 0x7c00, 0x0000, 0x3555});
  absl::StatusOr<std::vector<float>> h =
      SafetensorsToFloats({"h", SafeDType::kF16, {2, 4}, Bytes(half)});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(
      *h, (std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), -std::ldexp(1.0f, -14),
                              std::numeric_limits<float>::infinity(), 0.0f, 0.333251953125f}));
  const std::string nan = le16({0x7e00});
  EXPECT_TRUE(std::isnan((*SafetensorsToFloats({"n", SafeDType::kF16, {}, Bytes(nan)}))[0]));

  const std::string bf = le16({0x3f80, 0xc040, 0x0000});
  absl::StatusOr<std::vector<float>> b =
      SafetensorsToFloats({"b", SafeDType::kBF16, {3}, Bytes(bf)});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, (std::vector<float>{1.0f, -3.0f, 0.0f}));

  const std::string four(4, '\0');
  absl::StatusOr<std::vector<float>> i =
      SafetensorsToFloats({"i", SafeDType::kI32, {1}, Bytes(four)});
  EXPECT_EQ(i.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(i.status().message()), HasSubstr("tensor 'i': dtype I32, not F32"));
  EXPECT_FALSE(SafetensorsToFloats({"s", SafeDType::kF32, {2}, Bytes(four)}).ok());
}

}  // namespace
}  // namespace ladder
