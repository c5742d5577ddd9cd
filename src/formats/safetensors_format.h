// The safetensors format's constants (Hugging Face's tensor file format):
//
//   u64 little-endian N | N bytes of JSON header | data section
//
// The header is a JSON object mapping each tensor name to
// {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
// offsets in bytes relative to the start of the data section, plus an
// optional "__metadata__" object of string values. Data is raw, little
// endian, row major. Writers pad the header with spaces to a multiple of 8
// so that the data section starts aligned.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>

#include "absl/strings/string_view.h"

namespace ladder {

// Bytes of the header length prefix.
inline constexpr int kSafetensorsLengthBytes = 8;
// The longest header accepted (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Writers pad the header so that the data section starts at a multiple of this.
inline constexpr int kSafetensorsAlignment = 8;
// The reserved header key for string metadata.
inline constexpr char kSafetensorsMetadataKey[] = "__metadata__";

// Every element type of the format whose elements are whole bytes (the
// reference's order). Parsing accepts all of them; what a caller does with
// a dtype it has no use for is its own decision.
enum class SafeDType {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

struct SafeDTypeInfo {
  SafeDType dtype;
  const char* name;  // as spelled in the header
  int bytes;         // per element
};

inline constexpr SafeDTypeInfo kSafeDTypes[] = {
    {SafeDType::kBool, "BOOL", 1},      {SafeDType::kU8, "U8", 1},
    {SafeDType::kI8, "I8", 1},          {SafeDType::kF8E5M2, "F8_E5M2", 1},
    {SafeDType::kF8E4M3, "F8_E4M3", 1}, {SafeDType::kI16, "I16", 2},
    {SafeDType::kU16, "U16", 2},        {SafeDType::kF16, "F16", 2},
    {SafeDType::kBF16, "BF16", 2},      {SafeDType::kI32, "I32", 4},
    {SafeDType::kU32, "U32", 4},        {SafeDType::kF32, "F32", 4},
    {SafeDType::kF64, "F64", 8},        {SafeDType::kI64, "I64", 8},
    {SafeDType::kU64, "U64", 8},
};
static_assert(
    [] {
      for (int i = 0; i < static_cast<int>(std::size(kSafeDTypes)); ++i) {
        if (static_cast<int>(kSafeDTypes[i].dtype) != i) return false;
      }
      return true;
    }(),
    "kSafeDTypes is indexed by SafeDType");

inline constexpr const char* SafeDTypeName(SafeDType d) {
  return kSafeDTypes[static_cast<int>(d)].name;
}
inline constexpr int SafeDTypeBytes(SafeDType d) { return kSafeDTypes[static_cast<int>(d)].bytes; }

// The dtype spelled `name` exactly (case matters), or nullopt.
inline std::optional<SafeDType> SafeDTypeFromName(absl::string_view name) {
  for (const SafeDTypeInfo& info : kSafeDTypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace ladder
