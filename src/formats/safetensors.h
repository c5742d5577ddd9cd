// Reading and writing safetensors files (the format: safetensors_format.h;
// docs/formats.md, "Safetensors").
//
// Reading validates every length and offset before anything uses it, so a
// hostile file is refused, never read or allocated out of bounds: the header
// length against the file and kSafetensorsMaxHeaderBytes; the header as a
// JSON object with no duplicate key at any level and no nesting deeper than
// the format has; each entry with exactly "dtype", "shape" and
// "data_offsets", a dtype of the format (SafeDType), non-negative integer
// dims whose strides and byte count fit in int64, 0 <= begin <= end <= the
// data section's size and end - begin equal to the dtype's size times the
// element count; "__metadata__" an object of strings. Sorted by offset, the
// ranges must tile the data section exactly: no overlap, no hole, no
// trailing bytes (as the reference implementation demands). The header must
// start with '{' and may end with spaces (the alignment padding).
//
// Every refusal is InvalidArgument with one line saying what is wrong and,
// where a tensor is to blame, naming it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/formats/safetensors_format.h"

namespace ladder {

// A named tensor whose bytes are borrowed: from a SafetensorsFile when read,
// from the caller when written. `bytes` holds the elements row major, little
// endian; it need not be aligned for the element type (copy out with memcpy,
// or use SafetensorsToFloats).
struct SafetensorsTensor {
  std::string name;
  SafeDType dtype = SafeDType::kF32;
  std::vector<int64_t> shape;  // [] is a scalar; a 0 dim makes an empty tensor
  absl::Span<const uint8_t> bytes;
  int64_t numel() const;  // the product of shape (1 for a scalar)
};

// A parsed file. It owns the file's bytes; the tensors' spans point into
// them and stay valid for the object's lifetime, moves included.
class SafetensorsFile {
 public:
  // Parses a whole file's contents (taking ownership of them).
  static absl::StatusOr<SafetensorsFile> Parse(std::string contents);
  // Reads and parses `path`; errors are prefixed with the path. NotFound if
  // it cannot be opened.
  static absl::StatusOr<SafetensorsFile> Read(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  // In data order (increasing offset; empty tensors at one offset by name).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor called `name`, or null.
  const SafetensorsTensor* Find(const std::string& name) const;
  // "__metadata__" (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<const std::string> contents_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// The file holding `tensors` in the given order, data contiguous, the
// header padded with spaces to a multiple of kSafetensorsAlignment, and
// "__metadata__" first if `metadata` is not empty (as the Python library
// writes it). InvalidArgument, naming the tensor, for a name that is not
// valid UTF-8, repeated or "__metadata__", a negative dim, a shape whose
// byte count overflows or is not the span's size, or metadata that is not
// valid UTF-8.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// SerializeSafetensors, then written atomically (WriteFileAtomically): on
// any failure `path` is left as it was, and no partial file remains.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The elements of an F32, F16 or BF16 tensor as floats (exact: every value
// of those types is a float). InvalidArgument naming the tensor and its
// dtype for any other dtype or a byte count that is not the shape's.
absl::StatusOr<std::vector<float>> SafetensorsToFloats(const SafetensorsTensor& t);

}  // namespace ladder
