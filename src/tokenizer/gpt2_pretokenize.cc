#include "src/tokenizer/gpt2_pretokenize.h"

#include <unicode/uchar.h>

#include <cstdint>

#include "src/tokenizer/byte_unicode.h"
#include "src/tokenizer/pretokenize.h"

namespace ladder {
namespace {

enum class Class : uint8_t { kLetter, kNumber, kSpace, kOther };

Class ClassOf(char32_t c) {
  if (c < 0x80) {  // the common case, without ICU
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Class::kLetter;
    if (c >= '0' && c <= '9') return Class::kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return Class::kSpace;
    return Class::kOther;
  }
  const auto u = static_cast<UChar32>(c);
  const uint32_t mask = U_GET_GC_MASK(u);
  if (mask & U_GC_L_MASK) return Class::kLetter;
  if (mask & U_GC_N_MASK) return Class::kNumber;
  if (u_isUWhiteSpace(u)) return Class::kSpace;
  return Class::kOther;
}

// One code point of the text: its length in bytes and its class. A byte
// that starts no well-formed sequence is a code point of length 1, "other".
struct Unit {
  size_t size;
  Class cls;
};

Unit UnitAt(absl::string_view text, size_t i) {
  char32_t c = 0;
  const int len = DecodeUtf8(text, i, &c);
  if (len == 0) return {1, Class::kOther};
  return {static_cast<size_t>(len), ClassOf(c)};
}

}  // namespace

std::vector<absl::string_view> SplitGpt2Chunks(absl::string_view text) {
  std::vector<absl::string_view> chunks;
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t end;
    const Unit first = UnitAt(text, i);
    if (size_t len = ContractionAt(text, i); len > 0) {
      end = i + len;
    } else if (first.cls != Class::kSpace ||
               (text[i] == ' ' && i + 1 < n && UnitAt(text, i + 1).cls != Class::kSpace)) {
      // ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`: a run of one class,
      // with an optional leading space.
      const size_t start = first.cls == Class::kSpace ? i + 1 : i;
      const Unit lead = UnitAt(text, start);
      end = start + lead.size;
      while (end < n) {
        const Unit u = UnitAt(text, end);
        if (u.cls != lead.cls) break;
        end += u.size;
      }
    } else {
      // `\s+(?!\S)|\s+`: before a non-space, a run of two or more code
      // points leaves its last one to what follows.
      size_t last = i;
      end = i + first.size;
      while (end < n) {
        const Unit u = UnitAt(text, end);
        if (u.cls != Class::kSpace) break;
        last = end;
        end += u.size;
      }
      if (end < n && last > i) end = last;
    }
    chunks.push_back(text.substr(i, end - i));
    i = end;
  }
  return chunks;
}

}  // namespace ladder
