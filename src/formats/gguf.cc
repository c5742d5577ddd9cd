#include "src/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/bf16.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/formats/fp16.h"

namespace ladder {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little endian; this code copies scalars as they lie in memory");

// The scalar alternatives of GgufValue, in variant order; the arrays follow
// in the same order.
constexpr GgufValueType kScalarTypes[] = {
    GgufValueType::kU8,     GgufValueType::kI8,  GgufValueType::kU16, GgufValueType::kI16,
    GgufValueType::kU32,    GgufValueType::kI32, GgufValueType::kF32, GgufValueType::kBool,
    GgufValueType::kString, GgufValueType::kU64, GgufValueType::kI64, GgufValueType::kF64};
constexpr size_t kNumScalars = std::size(kScalarTypes);
static_assert(std::variant_size_v<GgufValue> == 2 * kNumScalars);

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// The bytes one element of a fixed-size type takes in a file; 0 for strings
// and arrays, -1 outside the enum.
int ElementBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return -1;
}

uint64_t PadTo(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

bool IsPowerOfTwo(uint32_t n) { return n != 0 && (n & (n - 1)) == 0; }

std::string TypeName(GgmlType t) {
  auto info = GgmlTypeInfoOf(t);
  return info ? info->name : absl::StrCat("type ", static_cast<uint32_t>(t));
}

// ---------------------------------------------------------------------------
// Writing.

template <typename T>
void Put(std::string* out, const T& v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

template <typename T>
void PutElement(std::string* out, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    PutString(out, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    out->push_back(v ? 1 : 0);
  } else {
    Put<T>(out, v);
  }
}

void PutValue(std::string* out, const GgufValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          using E = typename T::value_type;
          Put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kArray));
          Put<uint32_t>(out, static_cast<uint32_t>(GgufElementTypeOf(value)));
          Put<uint64_t>(out, v.size());
          for (const E& e : v) PutElement<E>(out, e);
        } else {
          Put<uint32_t>(out, static_cast<uint32_t>(GgufElementTypeOf(value)));
          PutElement<T>(out, v);
        }
      },
      value);
}

// Checks a value's lengths against the reader's limits.
absl::Status CheckValueLimits(const std::string& key, const GgufValue& value) {
  auto too_long = [&](uint64_t n) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: key '", key, "': a string of ", n,
                                                   " bytes is over the limit of ",
                                                   kGgufMaxStringBytes));
  };
  return std::visit(
      [&](const auto& v) -> absl::Status {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          if (v.size() > kGgufMaxArrayElements) {
            return absl::InvalidArgumentError(
                absl::StrCat("gguf: key '", key, "': an array of ", v.size(),
                             " elements is over the limit of ", kGgufMaxArrayElements));
          }
          if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const std::string& s : v) {
              if (s.size() > kGgufMaxStringBytes) return too_long(s.size());
            }
          }
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (v.size() > kGgufMaxStringBytes) return too_long(v.size());
        }
        return absl::OkStatus();
      },
      value);
}

// ---------------------------------------------------------------------------
// Reading.

// A bounds-checked cursor over the file. Every read checks the bytes left
// first; `what` names the thing being read in the error.
class Reader {
 public:
  explicit Reader(const std::string& s)
      : p_(reinterpret_cast<const uint8_t*>(s.data())), size_(s.size()) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* at(uint64_t offset) const { return p_ + offset; }

  template <typename T>
  absl::Status Read(T* v, const std::string& what) {
    if (left() < sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, ": file ends at byte ", size_,
                                                     ", ", sizeof(T), " bytes are needed at byte ",
                                                     pos_));
    }
    std::memcpy(v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* s, const std::string& what) {
    uint64_t n = 0;
    RETURN_IF_ERROR(Read(&n, what));
    if (n > kGgufMaxStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gguf: ", what, ": string length ", n, " is over the limit of ", kGgufMaxStringBytes));
    }
    if (n > left()) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, ": string length ", n,
                                                     " runs past the end of the file (", left(),
                                                     " bytes left at byte ", pos_, ")"));
    }
    s->assign(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

template <typename T>
absl::Status ReadElement(Reader& r, T* v, const std::string& what) {
  if constexpr (std::is_same_v<T, std::string>) {
    return r.ReadString(v, what);
  } else if constexpr (std::is_same_v<T, bool>) {
    uint8_t b = 0;
    RETURN_IF_ERROR(r.Read(&b, what));
    if (b > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", what, ": bool byte ", int{b}, " is neither 0 nor 1"));
    }
    *v = b != 0;
    return absl::OkStatus();
  } else {
    return r.Read(v, what);
  }
}

// Reads a value of scalar alternative I (or, with kArrayOffset, an array of
// `n` of them) into `out`.
template <size_t I>
absl::Status ReadAlternative(Reader& r, bool is_array, uint64_t n, GgufValue* out,
                             const std::string& what) {
  using T = std::variant_alternative_t<I, GgufValue>;
  if (!is_array) {
    T v{};
    RETURN_IF_ERROR(ReadElement<T>(r, &v, what));
    out->template emplace<I>(std::move(v));
    return absl::OkStatus();
  }
  using V = std::variant_alternative_t<I + kNumScalars, GgufValue>;
  // The count was checked against the bytes left (at least one byte, or a
  // length, per element), so this allocation is bounded by the file's size.
  V vec(n);
  for (uint64_t i = 0; i < n; ++i) {
    T e{};
    RETURN_IF_ERROR(ReadElement<T>(r, &e, what));
    vec[i] = std::move(e);
  }
  out->template emplace<I + kNumScalars>(std::move(vec));
  return absl::OkStatus();
}

template <size_t... Is>
absl::Status ReadValueOf(size_t index, Reader& r, bool is_array, uint64_t n, GgufValue* out,
                         const std::string& what, std::index_sequence<Is...>) {
  absl::Status s = absl::InternalError("gguf: no such value type");
  ((index == Is ? (s = ReadAlternative<Is>(r, is_array, n, out, what), true) : false) || ...);
  return s;
}

absl::StatusOr<GgufValue> ReadValue(Reader& r, const std::string& key) {
  const std::string what = absl::StrCat("key '", key, "'");
  uint32_t type = 0;
  RETURN_IF_ERROR(r.Read(&type, what));
  bool is_array = false;
  uint64_t n = 1;
  if (type == static_cast<uint32_t>(GgufValueType::kArray)) {
    is_array = true;
    RETURN_IF_ERROR(r.Read(&type, what));
    if (type == static_cast<uint32_t>(GgufValueType::kArray)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", what, ": arrays of arrays are not supported"));
    }
    RETURN_IF_ERROR(r.Read(&n, what));
  }
  if (type >= kGgufValueTypeCount) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, ": value type ", type,
                                                   " is not a GGUF type (0 to ",
                                                   kGgufValueTypeCount - 1, ")"));
  }
  if (is_array) {
    if (n > kGgufMaxArrayElements) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, ": array of ", n,
                                                     " elements is over the limit of ",
                                                     kGgufMaxArrayElements));
    }
    // Each element takes its size, or a string its 8-byte length at least.
    const int eb = ElementBytes(static_cast<GgufValueType>(type));
    const uint64_t min_bytes = n * static_cast<uint64_t>(eb == 0 ? 8 : eb);
    if (min_bytes > r.left()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", what, ": array of ", n, " ",
                       GgufValueTypeName(static_cast<GgufValueType>(type)), " needs at least ",
                       min_bytes, " bytes, only ", r.left(), " are left"));
    }
  }
  size_t index = 0;
  while (static_cast<uint32_t>(kScalarTypes[index]) != type) ++index;
  GgufValue value;
  RETURN_IF_ERROR(
      ReadValueOf(index, r, is_array, n, &value, what, std::make_index_sequence<kNumScalars>{}));
  return value;
}

}  // namespace

// ---------------------------------------------------------------------------

GgufValueType GgufValueTypeOf(const GgufValue& v) {
  return v.index() < kNumScalars ? kScalarTypes[v.index()] : GgufValueType::kArray;
}

GgufValueType GgufElementTypeOf(const GgufValue& v) {
  return kScalarTypes[v.index() % kNumScalars];
}

std::string GgufValueTypeString(const GgufValue& v) {
  if (v.index() < kNumScalars) return GgufValueTypeName(GgufElementTypeOf(v));
  return absl::StrCat("array of ", GgufValueTypeName(GgufElementTypeOf(v)));
}

int64_t GgufTensor::nelements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

absl::StatusOr<int64_t> GgufTensorBytes(const std::string& name, GgmlType type,
                                        const std::vector<int64_t>& ne) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: tensor '", name, "': ", why));
  };
  const auto info = GgmlTypeInfoOf(type);
  if (!info) return bad(absl::StrCat("ggml type ", static_cast<uint32_t>(type), " is not known"));
  if (ne.empty() || ne.size() > kGgmlMaxDims) {
    return bad(absl::StrCat(ne.size(), " dims (must be 1 to ", kGgmlMaxDims, ")"));
  }
  int64_t n = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) return bad(absl::StrCat("ne[", i, "] = ", ne[i], " is negative"));
    if (ne[i] != 0 && n > std::numeric_limits<int64_t>::max() / ne[i]) {
      return bad("its element count overflows int64");
    }
    n *= ne[i];
  }
  if (ne[0] % info->block_elems != 0) {
    return bad(absl::StrCat(info->name, " needs rows of a multiple of ", info->block_elems,
                            " elements, ne[0] is ", ne[0]));
  }
  const int64_t blocks = n / info->block_elems;
  if (blocks > std::numeric_limits<int64_t>::max() / info->block_bytes) {
    return bad("its byte count overflows int64");
  }
  return blocks * info->block_bytes;
}

absl::StatusOr<std::string> SerializeGguf(const std::vector<GgufKeyValue>& metadata,
                                          const std::vector<GgufTensor>& tensors) {
  uint32_t alignment = kGgufDefaultAlignment;
  std::set<std::string> keys;
  for (const GgufKeyValue& kv : metadata) {
    if (kv.key.empty()) return absl::InvalidArgumentError("gguf: a metadata key is empty");
    if (!keys.insert(kv.key).second) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: key '", kv.key, "' is given twice"));
    }
    if (kv.key.size() > kGgufMaxStringBytes) {
      return absl::InvalidArgumentError("gguf: a metadata key is over the string limit");
    }
    RETURN_IF_ERROR(CheckValueLimits(kv.key, kv.value));
    if (kv.key == kGgufKeyAlignment) {
      const uint32_t* a = std::get_if<uint32_t>(&kv.value);
      if (a == nullptr || !IsPowerOfTwo(*a)) {
        return absl::InvalidArgumentError(
            absl::StrCat("gguf: key '", kGgufKeyAlignment, "' must be a u32 power of two, not ",
                         a == nullptr ? GgufValueTypeString(kv.value) : absl::StrCat(*a)));
      }
      alignment = *a;
    }
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t data_bytes = 0;
  for (const GgufTensor& t : tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("gguf: a tensor name is empty");
    if (t.name.size() >= kGgmlMaxName) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: tensor '", t.name, "': name of ",
                                                     t.name.size(), " bytes is too long (at most ",
                                                     kGgmlMaxName - 1, ")"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: tensor '", t.name, "' is given twice"));
    }
    ASSIGN_OR_RETURN(const int64_t bytes, GgufTensorBytes(t.name, t.type, t.ne));
    if (static_cast<uint64_t>(bytes) != t.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: tensor '", t.name, "': ", TypeName(t.type), " of its shape takes ",
                       bytes, " bytes, the data has ", t.data.size()));
    }
    sizes.push_back(static_cast<uint64_t>(bytes));
    data_bytes += PadTo(static_cast<uint64_t>(bytes), alignment);
  }

  std::string out;
  out.append(kGgufMagic, sizeof(kGgufMagic));
  Put<uint32_t>(&out, kGgufVersion);
  Put<uint64_t>(&out, tensors.size());
  Put<uint64_t>(&out, metadata.size());
  for (const GgufKeyValue& kv : metadata) {
    PutString(&out, kv.key);
    PutValue(&out, kv.value);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensor& t = tensors[i];
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<int64_t>(&out, d);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&out, offset);
    offset += PadTo(sizes[i], alignment);
  }
  out.resize(PadTo(out.size(), alignment), '\0');
  out.reserve(out.size() + data_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.append(reinterpret_cast<const char*>(tensors[i].data.data()), tensors[i].data.size());
    out.resize(PadTo(out.size(), alignment), '\0');
  }
  return out;
}

absl::Status WriteGguf(const std::string& path, const std::vector<GgufKeyValue>& metadata,
                       const std::vector<GgufTensor>& tensors) {
  ASSIGN_OR_RETURN(std::string contents, SerializeGguf(metadata, tensors));
  return WriteFileAtomically(path, contents);
}

absl::StatusOr<GgufFile> GgufFile::Parse(std::string contents) {
  GgufFile f;
  f.contents_ = std::make_unique<const std::string>(std::move(contents));
  const std::string& s = *f.contents_;
  Reader r(s);

  char magic[4] = {};
  if (s.size() < sizeof(magic)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: file of ", s.size(), " bytes is too short for the magic"));
  }
  std::memcpy(magic, s.data(), sizeof(magic));
  if (std::memcmp(magic, kGgufMagic, sizeof(magic)) != 0) {
    return absl::InvalidArgumentError("gguf: the file does not start with the magic \"GGUF\"");
  }
  uint32_t skip = 0;
  RETURN_IF_ERROR(r.Read(&skip, "magic"));
  RETURN_IF_ERROR(r.Read(&f.version_, "header version"));
  if (f.version_ != kGgufVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: version ", f.version_, " is not supported (only ", kGgufVersion, ")"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(r.Read(&n_tensors, "header tensor count"));
  RETURN_IF_ERROR(r.Read(&n_kv, "header key count"));
  // The least a key-value pair takes: a length, one byte of key, a type and
  // one byte of value; a tensor info: a length, one byte of name, n_dims,
  // one dim, a type and an offset.
  constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
  constexpr uint64_t kMinTensorBytes = 8 + 1 + 4 + 8 + 4 + 8;
  if (n_kv > r.left() / kMinKvBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: key count ", n_kv, " cannot fit in the ", r.left(), " bytes left"));
  }
  if (n_tensors > (r.left() - n_kv * kMinKvBytes) / kMinTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: tensor count ", n_tensors,
                                                   " cannot fit in the ", r.left(), " bytes left"));
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    RETURN_IF_ERROR(r.ReadString(&key, absl::StrCat("key ", i)));
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("gguf: key ", i, " is empty"));
    if (f.key_index_.count(key) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: key '", key, "' appears twice"));
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(r, key));
    f.key_index_[key] = f.metadata_.size();
    f.metadata_.push_back({std::move(key), std::move(value)});
  }
  if (const GgufValue* a = f.Find(kGgufKeyAlignment)) {
    const uint32_t* v = std::get_if<uint32_t>(a);
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: key '", kGgufKeyAlignment, "' is ",
                                                     GgufValueTypeString(*a), ", must be u32"));
    }
    if (!IsPowerOfTwo(*v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: key '", kGgufKeyAlignment, "' is ", *v, ", not a power of two"));
    }
    f.alignment_ = *v;
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    RETURN_IF_ERROR(r.ReadString(&t.name, absl::StrCat("tensor ", i, " name")));
    if (t.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: tensor ", i, " has an empty name"));
    }
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    if (t.name.size() >= kGgmlMaxName) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, ": name of ", t.name.size(),
                                                     " bytes is too long (at most ",
                                                     kGgmlMaxName - 1, ")"));
    }
    if (f.tensor_index_.count(t.name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: ", what, " appears twice"));
    }
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(r.Read(&n_dims, what));
    if (n_dims == 0 || n_dims > kGgmlMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", what, ": n_dims ", n_dims, " (must be 1 to ", kGgmlMaxDims, ")"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      RETURN_IF_ERROR(r.Read(&ne, what));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("gguf: ", what, ": ne[", d, "] = ", ne, " is out of range"));
      }
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, what));
    t.type = static_cast<GgmlType>(type);
    RETURN_IF_ERROR(r.Read(&t.offset, what));
    RETURN_IF_ERROR(GgufTensorBytes(t.name, t.type, t.ne).status());
    f.tensor_index_[t.name] = f.tensors_.size();
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  f.data_offset_ = PadTo(r.pos(), f.alignment_);
  if (f.data_offset_ > s.size() && !f.tensors_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: the data section would start at byte ",
                                                   f.data_offset_, ", past the end of the file (",
                                                   s.size(), " bytes)"));
  }
  uint64_t expected = 0;  // where the next tensor must start
  for (GgufTensor& t : f.tensors_) {
    const std::string what = absl::StrCat("gguf: tensor '", t.name, "'");
    if (t.offset != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": offset ", t.offset, " is not ", expected,
          " (tensors must lie in order, each padded to the alignment of ", f.alignment_, ")"));
    }
    // GgufTensorBytes checked the shape when the info was read.
    const uint64_t bytes = static_cast<uint64_t>(*GgufTensorBytes(t.name, t.type, t.ne));
    const uint64_t room = s.size() - f.data_offset_;
    if (t.offset > room || bytes > room - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": its ", bytes, " bytes at offset ",
                                                     t.offset, " run past the end of the data (",
                                                     room, " bytes)"));
    }
    t.data = absl::MakeConstSpan(r.at(f.data_offset_ + t.offset), bytes);
    expected = t.offset + PadTo(bytes, f.alignment_);
  }
  // gguf.cpp writes (and, loading the data, reads) the padding after the
  // last tensor too; with no tensors the file may stop after the metadata.
  const uint64_t end = f.tensors_.empty() ? f.data_offset_ : f.data_offset_ + expected;
  if (!f.tensors_.empty() && s.size() < end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gguf: the file ends at byte ", s.size(), ", inside the padding after tensor '",
        f.tensors_.back().name, "' (to byte ", end, ")"));
  }
  if (s.size() > end) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: ", s.size() - end, " bytes after the end of the data at byte ", end));
  }
  return f;
}

absl::StatusOr<GgufFile> GgufFile::Read(const std::string& path) {
  ASSIGN_OR_RETURN(std::string contents, ReadFile(path));
  auto f = Parse(std::move(contents));
  if (!f.ok()) {
    return absl::Status(f.status().code(), absl::StrCat(path, ": ", f.status().message()));
  }
  return f;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------

std::vector<Gpt2GgufTensorSpec> Gpt2GgufTensors(int64_t n_vocab, int64_t n_ctx, int64_t n_embd,
                                                int64_t n_ff, int n_layer, bool separate_output) {
  std::vector<Gpt2GgufTensorSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> ne, bool keep_f32) {
    keep_f32 = keep_f32 || ne.size() == 1;
    out.push_back({std::move(name), std::move(ne), keep_f32});
  };
  add(GgufTensorName(kGgufTokenEmbd, kGgufWeight), {n_embd, n_vocab}, false);
  add(GgufTensorName(kGgufPosEmbd, kGgufWeight), {n_embd, n_ctx}, true);
  for (int i = 0; i < n_layer; ++i) {
    auto norm = [&](const char* t) {
      add(GgufBlockTensorName(i, t, kGgufWeight), {n_embd}, true);
      add(GgufBlockTensorName(i, t, kGgufBias), {n_embd}, true);
    };
    auto linear = [&](const char* t, int64_t in, int64_t out_features) {
      add(GgufBlockTensorName(i, t, kGgufWeight), {in, out_features}, false);
      add(GgufBlockTensorName(i, t, kGgufBias), {out_features}, true);
    };
    norm(kGgufAttnNorm);
    linear(kGgufAttnQkv, n_embd, 3 * n_embd);
    linear(kGgufAttnOutput, n_embd, n_embd);
    norm(kGgufFfnNorm);
    linear(kGgufFfnUp, n_embd, n_ff);
    linear(kGgufFfnDown, n_ff, n_embd);
  }
  add(GgufTensorName(kGgufOutputNorm, kGgufWeight), {n_embd}, true);
  add(GgufTensorName(kGgufOutputNorm, kGgufBias), {n_embd}, true);
  if (separate_output) add(GgufTensorName(kGgufOutput, kGgufWeight), {n_embd, n_vocab}, false);
  return out;
}

absl::StatusOr<std::vector<uint8_t>> QuantizeQ8_0(absl::Span<const float> x) {
  if (x.size() % kQ8_0BlockElems != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: Q8_0 takes a multiple of ",
                                                   kQ8_0BlockElems, " values, not ", x.size()));
  }
  const size_t n_blocks = x.size() / kQ8_0BlockElems;
  std::vector<uint8_t> out(n_blocks * kQ8_0BlockBytes);
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* v = x.data() + b * kQ8_0BlockElems;
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0BlockElems; ++j) {
      if (!std::isfinite(v[j])) {
        return absl::InvalidArgumentError(absl::StrCat("gguf: Q8_0: value ", v[j], " at element ",
                                                       b * kQ8_0BlockElems + j, " is not finite"));
      }
      amax = std::max(amax, std::fabs(v[j]));
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const fp16 dh = FloatToFp16(d);
    if ((dh & 0x7fffu) == 0x7c00u) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: Q8_0: the scale ", d, " of block ", b, " overflows fp16"));
    }
    uint8_t* o = out.data() + b * kQ8_0BlockBytes;
    std::memcpy(o, &dh, sizeof(dh));
    for (int j = 0; j < kQ8_0BlockElems; ++j) {
      const int8_t q = static_cast<int8_t>(std::roundf(v[j] * id));  // |v * id| <= 127
      std::memcpy(o + 2 + j, &q, 1);
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> DequantizeQ8_0(absl::Span<const uint8_t> blocks) {
  if (blocks.size() % kQ8_0BlockBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gguf: Q8_0 data of ", blocks.size(), " bytes is not whole blocks of ", kQ8_0BlockBytes));
  }
  const size_t n_blocks = blocks.size() / kQ8_0BlockBytes;
  std::vector<float> out(n_blocks * kQ8_0BlockElems);
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* p = blocks.data() + b * kQ8_0BlockBytes;
    fp16 dh;
    std::memcpy(&dh, p, sizeof(dh));
    const float d = Fp16ToFloat(dh);
    for (int j = 0; j < kQ8_0BlockElems; ++j) {
      int8_t q;
      std::memcpy(&q, p + 2 + j, 1);
      out[b * kQ8_0BlockElems + j] = static_cast<float>(q) * d;
    }
  }
  return out;
}

absl::StatusOr<std::vector<uint8_t>> GgufEncode(const std::string& name, GgmlType type,
                                                const std::vector<int64_t>& ne,
                                                absl::Span<const float> values) {
  ASSIGN_OR_RETURN(const int64_t bytes, GgufTensorBytes(name, type, ne));
  const std::string what = absl::StrCat("gguf: tensor '", name, "' (", TypeName(type), ")");
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  if (static_cast<uint64_t>(n) != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": its shape holds ", n, " values, ", values.size(), " were given"));
  }
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::kF32:
      out.resize(values.size() * sizeof(float));
      if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      out.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = type == GgmlType::kF16 ? FloatToFp16(values[i]) : FloatToBf16(values[i]);
        if (type == GgmlType::kF16 && (h & 0x7fffu) == 0x7c00u && std::isfinite(values[i])) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": value ", values[i], " at element ", i, " overflows f16"));
        }
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case GgmlType::kQ8_0: {
      auto q = QuantizeQ8_0(values);
      if (!q.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", q.status().message().substr(std::strlen("gguf: "))));
      }
      out = *std::move(q);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": encoding to this type is not supported"));
  }
  if (static_cast<int64_t>(out.size()) != bytes) {
    return absl::InternalError(absl::StrCat(what, ": encoded ", out.size(), " bytes, not ", bytes));
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufTensorToFloats(const GgufTensor& t) {
  ASSIGN_OR_RETURN(const int64_t bytes, GgufTensorBytes(t.name, t.type, t.ne));
  const std::string what = absl::StrCat("gguf: tensor '", t.name, "' (", TypeName(t.type), ")");
  if (static_cast<uint64_t>(bytes) != t.data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": has ", t.data.size(), " bytes, its shape takes ", bytes));
  }
  const size_t n = static_cast<size_t>(t.nelements());
  std::vector<float> out(n);
  switch (t.type) {
    case GgmlType::kF32:
      if (n != 0) std::memcpy(out.data(), t.data.data(), n * sizeof(float));
      return out;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * i, 2);
        out[i] = t.type == GgmlType::kF16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
      }
      return out;
    case GgmlType::kQ8_0:
      return DequantizeQ8_0(t.data);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": decoding this type is not supported"));
  }
}

}  // namespace ladder
