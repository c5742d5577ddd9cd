#include "src/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/core/bf16.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/formats/fp16.h"

namespace ladder {
namespace {

using Json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", what));
}

// A name or string from the file for an error message: at most 64 bytes,
// control characters escaped, in single quotes.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 64;
  const bool clipped = s.size() > kMax;
  std::string q =
      Json(std::string(s.substr(0, kMax))).dump(-1, ' ', false, Json::error_handler_t::replace);
  return absl::StrCat("'", absl::string_view(q).substr(1, q.size() - 2), clipped ? "...'" : "'");
}

std::string TensorPrefix(absl::string_view name) {
  return absl::StrCat("tensor ", Quote(name), ": ");
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The bytes a tensor of `dtype` and `shape` holds, or InvalidArgument: a
// negative dim, or a shape whose strides or byte count would not fit in
// int64 (the product of the dims, zeros counted as ones, must fit, so that
// no stride computed from the shape overflows even when the tensor is empty).
absl::StatusOr<int64_t> ByteCount(absl::string_view name, SafeDType dtype,
                                  const std::vector<int64_t>& shape) {
  int64_t strides = 1, numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return Bad(absl::StrCat(TensorPrefix(name), "shape[", i, "] is negative (", shape[i], ")"));
    }
    if (__builtin_mul_overflow(strides, std::max<int64_t>(shape[i], 1), &strides)) {
      return Bad(absl::StrCat(TensorPrefix(name), "shape ", ShapeString(shape),
                              " overflows 64-bit sizes"));
    }
    numel *= shape[i];  // <= strides: cannot overflow
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, int64_t{SafeDTypeBytes(dtype)}, &bytes)) {
    return Bad(absl::StrCat(TensorPrefix(name), SafeDTypeName(dtype), " ", ShapeString(shape),
                            " overflows 64-bit sizes"));
  }
  return bytes;
}

// Builds the header's JSON tree, refusing what nlohmann's own parser would
// let through: a key repeated in an object (its parser keeps the last one
// silently) and nesting deeper than the format has (root object, tensor
// entry, shape array), which would otherwise cost memory per byte of input.
class HeaderSax : public nlohmann::json_sax<Json> {
 public:
  static constexpr size_t kMaxDepth = 3;

  Json root;
  std::string error;  // set when a handler refused

  bool null() override { return Add(Json(nullptr)); }
  bool boolean(bool v) override { return Add(Json(v)); }
  bool number_integer(number_integer_t v) override { return Add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Add(Json(v)); }
  bool string(string_t& v) override { return Add(Json(std::move(v))); }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }
  bool start_object(size_t) override { return Open(Json::object()); }
  bool start_array(size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    const Json::object_t& obj = stack_.back()->get_ref<const Json::object_t&>();
    if (obj.count(k) != 0) {
      if (stack_.size() == 1) {
        return Fail(k == kSafetensorsMetadataKey
                        ? "__metadata__ appears twice"
                        : absl::StrCat("tensor ", Quote(k), " appears twice"));
      }
      if (stack_.size() == 2 && container_keys_.back() == kSafetensorsMetadataKey) {
        return Fail(absl::StrCat("__metadata__ key ", Quote(k), " appears twice"));
      }
      if (stack_.size() == 2) {
        return Fail(
            absl::StrCat(TensorPrefix(container_keys_.back()), "key ", Quote(k), " appears twice"));
      }
      return Fail(absl::StrCat("key ", Quote(k), " appears twice in one object"));
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    return Fail(absl::StrCat("the header is not valid JSON (byte ", position, "): ", what));
  }

 private:
  bool Fail(std::string what) {
    error = std::move(what);
    return false;
  }

  // Puts `v` where the parser is: the root, the pending key of the open
  // object, or the end of the open array. The returned pointer stays valid
  // while `v` is open: nothing is added to its parent until it closes.
  Json* Place(Json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json* parent = stack_.back();
    if (parent->is_object()) {
      return &parent->get_ref<Json::object_t&>().emplace(key_, std::move(v)).first->second;
    }
    Json::array_t& arr = parent->get_ref<Json::array_t&>();
    arr.push_back(std::move(v));
    return &arr.back();
  }
  bool Add(Json v) {
    Place(std::move(v));
    return true;
  }
  bool Open(Json container) {
    if (stack_.size() == kMaxDepth) {
      return Fail("the header nests deeper than a safetensors header has");
    }
    container_keys_.push_back(stack_.empty() || !stack_.back()->is_object() ? "" : key_);
    stack_.push_back(Place(std::move(container)));
    return true;
  }
  bool Close() {
    stack_.pop_back();
    container_keys_.pop_back();
    return true;
  }

  std::vector<Json*> stack_;                 // the open containers
  std::vector<std::string> container_keys_;  // the key each was opened under
  std::string key_;                          // the pending key
};

absl::StatusOr<Json> ParseHeader(absl::string_view header) {
  HeaderSax sax;
  bool ok = false;
  try {
    ok = Json::sax_parse(header.data(), header.data() + header.size(), &sax);
  } catch (const std::exception& e) {  // not expected: the SAX parser reports through the handler
    return Bad(absl::StrCat("the header is not valid JSON: ", e.what()));
  }
  if (!ok) return Bad(sax.error.empty() ? "the header is not valid JSON" : sax.error);
  return std::move(sax.root);
}

// A JSON array of `n` non-negative integers that fit in int64, or an error
// naming `what`.
absl::StatusOr<std::vector<int64_t>> Naturals(const Json& v, absl::string_view tensor,
                                              absl::string_view what, size_t n_or_any) {
  constexpr size_t kAny = 0;
  if (!v.is_array() || (n_or_any != kAny && v.size() != n_or_any)) {
    return Bad(absl::StrCat(TensorPrefix(tensor), what, " is not an array of ",
                            n_or_any == kAny ? "" : absl::StrCat(n_or_any, " "), "integers"));
  }
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (e.is_number_unsigned()) {
      const uint64_t u = e.get<uint64_t>();
      if (u > static_cast<uint64_t>(kInt64Max)) {
        return Bad(absl::StrCat(TensorPrefix(tensor), what, "[", i, "] = ", u, " is too large"));
      }
      out.push_back(static_cast<int64_t>(u));
    } else if (e.is_number_integer()) {
      return Bad(absl::StrCat(TensorPrefix(tensor), what, "[", i, "] is negative (",
                              e.get<int64_t>(), ")"));
    } else {
      return Bad(absl::StrCat(TensorPrefix(tensor), what, "[", i, "] is not an integer"));
    }
  }
  return out;
}

struct Entry {
  SafetensorsTensor tensor;
  int64_t begin = 0, end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& v, int64_t data_size) {
  const std::string at = TensorPrefix(name);
  if (!v.is_object()) return Bad(absl::StrCat(at, "the entry is not an object"));
  for (const auto& [k, unused] : v.get_ref<const Json::object_t&>()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      return Bad(absl::StrCat(at, "unexpected key ", Quote(k)));
    }
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) return Bad(absl::StrCat(at, "no \"", k, "\""));
  }
  Entry e;
  e.tensor.name = name;
  const Json& dtype = v.at("dtype");
  if (!dtype.is_string()) return Bad(absl::StrCat(at, "dtype is not a string"));
  const std::optional<SafeDType> d = SafeDTypeFromName(dtype.get_ref<const std::string&>());
  if (!d) {
    return Bad(absl::StrCat(at, "unknown dtype ", Quote(dtype.get_ref<const std::string&>())));
  }
  e.tensor.dtype = *d;
  ASSIGN_OR_RETURN(e.tensor.shape, Naturals(v.at("shape"), name, "shape", 0));
  ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                   Naturals(v.at("data_offsets"), name, "data_offsets", 2));
  e.begin = offsets[0];
  e.end = offsets[1];
  const std::string range = absl::StrCat("data_offsets [", e.begin, ", ", e.end, ")");
  if (e.end < e.begin) return Bad(absl::StrCat(at, range, " end before they begin"));
  if (e.end > data_size) {
    return Bad(
        absl::StrCat(at, range, " run past the end of the data section (", data_size, " bytes)"));
  }
  ASSIGN_OR_RETURN(const int64_t bytes, ByteCount(name, e.tensor.dtype, e.tensor.shape));
  if (e.end - e.begin != bytes) {
    return Bad(absl::StrCat(at, range, " but ", SafeDTypeName(e.tensor.dtype), " ",
                            ShapeString(e.tensor.shape), " needs ", bytes, " bytes"));
  }
  return e;
}

// `s` as a JSON string, or false if it is not valid UTF-8.
bool JsonString(const std::string& s, std::string* out) {
  try {
    *out += Json(s).dump();
  } catch (const Json::type_error&) {
    return false;
  }
  return true;
}

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string contents) {
  SafetensorsFile f;
  f.contents_ = std::make_unique<const std::string>(std::move(contents));
  const std::string& c = *f.contents_;
  if (c.size() < static_cast<size_t>(kSafetensorsLengthBytes)) {
    return Bad(absl::StrCat("the file is ", c.size(), " bytes, too short for the ",
                            kSafetensorsLengthBytes, "-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < kSafetensorsLengthBytes; ++i) {
    n |= uint64_t{static_cast<uint8_t>(c[i])} << (8 * i);
  }
  if (n > kSafetensorsMaxHeaderBytes) {
    return Bad(absl::StrCat("header length ", n, " is over the limit of ",
                            kSafetensorsMaxHeaderBytes, " bytes"));
  }
  const size_t rest = c.size() - kSafetensorsLengthBytes;
  if (n > rest) {
    return Bad(
        absl::StrCat("header length ", n, " runs past the end of the file (", c.size(), " bytes)"));
  }
  const absl::string_view header(c.data() + kSafetensorsLengthBytes, n);
  const int64_t data_size = static_cast<int64_t>(rest - n);
  const uint8_t* data = reinterpret_cast<const uint8_t*>(header.data() + header.size());
  if (header.empty() || header[0] != '{') return Bad("the header does not start with '{'");
  ASSIGN_OR_RETURN(const Json root, ParseHeader(header));
  if (!root.is_object()) return Bad("the header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [name, v] : root.get_ref<const Json::object_t&>()) {
    if (name == kSafetensorsMetadataKey) {
      if (!v.is_object()) return Bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.get_ref<const Json::object_t&>()) {
        if (!s.is_string()) return Bad(absl::StrCat("__metadata__ ", Quote(k), " is not a string"));
        f.metadata_.emplace(k, s.get<std::string>());
      }
      continue;
    }
    ASSIGN_OR_RETURN(Entry e, ParseEntry(name, v, data_size));
    entries.push_back(std::move(e));
  }

  // Sorted by offset, the ranges must tile the data section. (Ties, empty
  // tensors at one offset, stay in name order.)
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  int64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered) {
      const Entry& p = entries[i - 1];  // covered > 0, so there is one
      return Bad(absl::StrCat(TensorPrefix(e.tensor.name), "data_offsets [", e.begin, ", ", e.end,
                              ") overlap those of tensor ", Quote(p.tensor.name), ", [", p.begin,
                              ", ", p.end, ")"));
    }
    if (e.begin > covered) {
      return Bad(absl::StrCat("bytes [", covered, ", ", e.begin,
                              ") of the data section belong to no tensor (a hole before tensor ",
                              Quote(e.tensor.name), ")"));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Bad(absl::StrCat("bytes [", covered, ", ", data_size,
                            ") at the end of the data section belong to no tensor"));
  }

  f.tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.tensor.bytes = absl::MakeConstSpan(data + e.begin, static_cast<size_t>(e.end - e.begin));
    f.index_.emplace(e.tensor.name, f.tensors_.size());
    f.tensors_.push_back(std::move(e.tensor));
  }
  return f;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  ASSIGN_OR_RETURN(std::string contents, ReadFile(path));
  absl::StatusOr<SafetensorsFile> f = Parse(std::move(contents));
  if (!f.ok())
    return absl::Status(f.status().code(), absl::StrCat(path, ": ", f.status().message()));
  return f;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      if (!JsonString(k, &header)) return Bad("a __metadata__ key is not valid UTF-8");
      header += ':';
      if (!JsonString(v, &header)) {
        return Bad(absl::StrCat("__metadata__ ", Quote(k), " is not valid UTF-8"));
      }
    }
    header += '}';
  }
  std::set<absl::string_view> seen;
  int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::string at = TensorPrefix(t.name);
    if (t.name == kSafetensorsMetadataKey) return Bad(absl::StrCat(at, "the name is reserved"));
    if (!seen.insert(t.name).second) return Bad(absl::StrCat(at, "the name appears twice"));
    ASSIGN_OR_RETURN(const int64_t bytes, ByteCount(t.name, t.dtype, t.shape));
    if (static_cast<uint64_t>(bytes) != t.bytes.size()) {
      return Bad(absl::StrCat(at, SafeDTypeName(t.dtype), " ", ShapeString(t.shape), " needs ",
                              bytes, " bytes, given ", t.bytes.size()));
    }
    if (header.size() > 1) header += ',';
    if (!JsonString(t.name, &header)) return Bad(absl::StrCat(at, "the name is not valid UTF-8"));
    absl::StrAppend(&header, ":{\"dtype\":\"", SafeDTypeName(t.dtype), "\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + bytes, "]}");
    offset += bytes;
  }
  header += '}';
  header.append(
      (kSafetensorsAlignment - header.size() % kSafetensorsAlignment) % kSafetensorsAlignment, ' ');
  if (header.size() > kSafetensorsMaxHeaderBytes) {
    return Bad(absl::StrCat("the header would be ", header.size(), " bytes, over the limit of ",
                            kSafetensorsMaxHeaderBytes));
  }

  std::string out;
  out.reserve(kSafetensorsLengthBytes + header.size() + static_cast<size_t>(offset));
  for (int i = 0; i < kSafetensorsLengthBytes; ++i) {
    out += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
  }
  out += header;
  for (const SafetensorsTensor& t : tensors) {
    out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string contents, SerializeSafetensors(tensors, metadata));
  return WriteFileAtomically(path, contents);
}

absl::StatusOr<std::vector<float>> SafetensorsToFloats(const SafetensorsTensor& t) {
  if (t.dtype != SafeDType::kF32 && t.dtype != SafeDType::kF16 && t.dtype != SafeDType::kBF16) {
    return Bad(absl::StrCat(TensorPrefix(t.name), "dtype ", SafeDTypeName(t.dtype),
                            ", not F32, F16 or BF16"));
  }
  ASSIGN_OR_RETURN(const int64_t bytes, ByteCount(t.name, t.dtype, t.shape));
  if (static_cast<uint64_t>(bytes) != t.bytes.size()) {
    return Bad(absl::StrCat(TensorPrefix(t.name), SafeDTypeName(t.dtype), " ", ShapeString(t.shape),
                            " needs ", bytes, " bytes, given ", t.bytes.size()));
  }
  const int size = SafeDTypeBytes(t.dtype);
  std::vector<float> out(static_cast<size_t>(bytes / size));
  const uint8_t* p = t.bytes.data();
  for (size_t i = 0; i < out.size(); ++i, p += size) {
    switch (t.dtype) {
      case SafeDType::kF32:
        out[i] = std::bit_cast<float>(Load32(p));
        break;
      case SafeDType::kF16:
        out[i] = Fp16ToFloat(Load16(p));
        break;
      default:  // kBF16
        out[i] = Bf16ToFloat(Load16(p));
        break;
    }
  }
  return out;
}

}  // namespace ladder
