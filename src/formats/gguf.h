// Writing and reading GGUF v3 files (the format: gguf_format.h), and the
// tensor encodings this project writes into them: F32, F16 and Q8_0.
//
// The writer lays a file out as llama.cpp's own writer does (ggml/src/
// gguf.cpp): keys in the order given, tensor infos in the order given, the
// data section aligned, every tensor's data padded to the alignment, the
// last one included, so that llama.cpp's reader accepts what it writes.
//
// The reader parses and validates a whole file held in memory. Every count,
// length and offset is checked against the bytes that are left before it
// is used or anything is allocated from it, so a hostile file is refused,
// never read out of bounds: the magic; version 3 exactly; key and tensor
// counts that the remaining bytes could hold; every string's length (at
// most kGgufMaxStringBytes and the bytes left); non-empty keys, no key
// twice; value types of the enum, arrays of scalars or strings only (no
// arrays of arrays), at most kGgufMaxArrayElements elements; bools 0 or 1;
// "general.alignment", if present, a u32 power of two; tensor names
// non-empty, shorter than kGgmlMaxName bytes and unique; 1 to 4 dims, each
// in [0, 2^63), whose element and byte counts fit in int64; a known ggml
// type whose block divides ne[0]; and the data where gguf.cpp demands it:
// tensor i at the sum of the padded sizes of tensors 0..i-1 (so aligned,
// in order, no overlap), inside the file, with nothing after the last
// tensor's padding.
//
// Every refusal is InvalidArgument with one line that names the key or
// tensor at fault (if one is) and what is wrong with it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/formats/gguf_format.h"

namespace ladder {

// A metadata value: one of the scalar types, a string, or an array of one
// of them. The C++ type is the GGUF type: uint32_t is u32, int32_t is i32,
// float f32, bool bool, std::string string, std::vector<std::string> an
// array of strings, and so on (GgufValueTypeOf). Write the type out when
// constructing one (uint32_t{768}, std::string("gpt2")): a bare 768 is i32.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, uint64_t, int64_t, double, std::vector<uint8_t>,
                               std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                               std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>,
                               std::vector<bool>, std::vector<std::string>, std::vector<uint64_t>,
                               std::vector<int64_t>, std::vector<double>>;

// A value's type as the file stores it: kArray for the vectors.
GgufValueType GgufValueTypeOf(const GgufValue& v);
// The element type: the scalar type, or an array's element type.
GgufValueType GgufElementTypeOf(const GgufValue& v);
// "u32", "string", "array of i32", ...
std::string GgufValueTypeString(const GgufValue& v);

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

// A tensor. Its bytes are borrowed: from the caller when written, from a
// GgufFile when read. `ne` is in ggml order (ne[0], the row length, varies
// fastest), 1 to 4 dims; `data` holds GgufTensorBytes(type, ne) bytes
// (it need not be aligned; copy out with memcpy or GgufTensorToFloats).
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;
  absl::Span<const uint8_t> data;
  // Read: the offset of `data` from the data section's start. Ignored when
  // writing (the writer computes the offsets).
  uint64_t offset = 0;

  int64_t nelements() const;  // the product of ne
};

// The bytes of a tensor of `type` and shape `ne`: nelements / block_elems *
// block_bytes. InvalidArgument, naming `name`, for an unknown type, no dims
// or more than 4, a negative dim, ne[0] that is not a whole number of
// blocks, or a count that overflows int64.
absl::StatusOr<int64_t> GgufTensorBytes(const std::string& name, GgmlType type,
                                        const std::vector<int64_t>& ne);

// The file holding `metadata` (in the given order) and `tensors` (infos and
// data in the given order). The alignment is the value of a
// "general.alignment" entry if there is one (it must be a u32 power of two),
// else 32. InvalidArgument, naming the key or tensor, for an empty or
// repeated key, a bad alignment entry, an array longer than
// kGgufMaxArrayElements or a string longer than kGgufMaxStringBytes, a tensor
// name that is empty, repeated or kGgmlMaxName bytes or longer, a shape
// GgufTensorBytes refuses, or data whose size is not the shape's.
absl::StatusOr<std::string> SerializeGguf(const std::vector<GgufKeyValue>& metadata,
                                          const std::vector<GgufTensor>& tensors);

// SerializeGguf, then written atomically (WriteFileAtomically): on any
// failure `path` is left as it was and no partial file remains.
absl::Status WriteGguf(const std::string& path, const std::vector<GgufKeyValue>& metadata,
                       const std::vector<GgufTensor>& tensors);

// A parsed file. It owns the file's bytes; the tensors' spans point into them
// and stay valid for the object's lifetime, moves included.
class GgufFile {
 public:
  // Parses a whole file's contents (taking ownership of them).
  static absl::StatusOr<GgufFile> Parse(std::string contents);
  // Reads and parses `path`; errors are prefixed with the path. NotFound if
  // it cannot be opened.
  static absl::StatusOr<GgufFile> Read(const std::string& path);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // The data section's offset from the start of the file.
  uint64_t data_offset() const { return data_offset_; }

  // In file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  // The value of `key`, or null.
  const GgufValue* Find(const std::string& key) const;
  // The value of `key` if it is there and of type T (uint32_t for u32,
  // std::vector<std::string> for an array of strings, ...); else null.
  template <typename T>
  const T* Get(const std::string& key) const {
    const GgufValue* v = Find(key);
    return v == nullptr ? nullptr : std::get_if<T>(v);
  }

  // In file order (which is data order).
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // The tensor called `name`, or null.
  const GgufTensor* FindTensor(const std::string& name) const;

 private:
  GgufFile() = default;
  std::unique_ptr<const std::string> contents_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string, size_t> key_index_;  // key -> position in metadata_
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;  // name -> position in tensors_
};

// ---------------------------------------------------------------------------
// GPT-2.

// A tensor llama.cpp's GPT-2 loader takes (gguf_format.h has the list and
// where it comes from): its name, its shape in ggml order, and whether it
// stays F32 whatever the file's type (convert_hf_to_gguf.py keeps every 1-D
// tensor and position_embd in F32).
struct Gpt2GgufTensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  bool keep_f32 = false;
};

// Every tensor of a GPT-2 of these sizes, in the order token_embd,
// position_embd, blk.0 .. blk.{n_layer-1} (attn_norm, attn_qkv, attn_output,
// ffn_norm, ffn_up, ffn_down; weight before bias), output_norm, and
// output.weight only if `separate_output` (without it llama.cpp uses
// token_embd, as for GPT-2's tied embeddings).
std::vector<Gpt2GgufTensorSpec> Gpt2GgufTensors(int64_t n_vocab, int64_t n_ctx, int64_t n_embd,
                                                int64_t n_ff, int n_layer, bool separate_output);

// ---------------------------------------------------------------------------
// Encodings.

// Q8_0 blocks of `x` (llama.cpp's quantize_row_q8_0_ref, gguf_format.h):
// x.size() / 32 blocks of 34 bytes. InvalidArgument if x.size() is not a
// multiple of 32, if a value is not finite, or if a block's scale overflows
// fp16 (|x| beyond 127 * 65504).
absl::StatusOr<std::vector<uint8_t>> QuantizeQ8_0(absl::Span<const float> x);
// The values of Q8_0 blocks: 32 per 34 bytes, qs[j] * fp16 d.
// InvalidArgument if the size is not a multiple of 34.
absl::StatusOr<std::vector<float>> DequantizeQ8_0(absl::Span<const uint8_t> blocks);

// The bytes of tensor `name` of shape `ne` (ggml order) in `type`, from its
// values in row order (values.size() must be the shape's element count).
// F32 is a copy; F16 rounds to nearest even and refuses a finite value that
// would become infinite; BF16 rounds as bf16.h; Q8_0 as QuantizeQ8_0, and
// needs ne[0] to be a multiple of 32. Other types are not encoded. Errors are
// InvalidArgument naming the tensor, its type and the problem.
absl::StatusOr<std::vector<uint8_t>> GgufEncode(const std::string& name, GgmlType type,
                                                const std::vector<int64_t>& ne,
                                                absl::Span<const float> values);

// A tensor's values as floats (row order), for F32, F16, BF16 and Q8_0.
// InvalidArgument naming the tensor and its type for any other type or a
// byte count that is not the shape's.
absl::StatusOr<std::vector<float>> GgufTensorToFloats(const GgufTensor& t);

}  // namespace ladder
