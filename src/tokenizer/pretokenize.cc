#include "src/tokenizer/pretokenize.h"

#include <cstdint>

namespace ladder {
namespace {

enum class Class : uint8_t { kLetter, kDigit, kSpace, kOther };

Class ClassOf(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return Class::kLetter;
  if (c >= '0' && c <= '9') return Class::kDigit;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return Class::kSpace;
  return Class::kOther;
}

}  // namespace

size_t ContractionAt(absl::string_view text, size_t i) {
  if (text[i] != '\'' || i + 1 >= text.size()) return 0;
  const char a = text[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= text.size()) return 0;
  const char b = text[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

std::vector<absl::string_view> SplitChunks(absl::string_view text) {
  std::vector<absl::string_view> chunks;
  const size_t n = text.size();
  auto cls = [&](size_t i) { return ClassOf(static_cast<unsigned char>(text[i])); };
  size_t i = 0;
  while (i < n) {
    size_t end;
    if (size_t len = ContractionAt(text, i); len > 0) {
      end = i + len;
    } else if (cls(i) != Class::kSpace ||
               (text[i] == ' ' && i + 1 < n && cls(i + 1) != Class::kSpace)) {
      // A run of one class, with an optional leading space.
      const size_t start = text[i] == ' ' ? i + 1 : i;
      const Class c = cls(start);
      end = start + 1;
      while (end < n && cls(end) == c) ++end;
    } else {
      end = i + 1;
      while (end < n && cls(end) == Class::kSpace) ++end;
      // Before a non-space, the last whitespace byte goes with what follows.
      if (end < n && end - i >= 2) --end;
    }
    chunks.push_back(text.substr(i, end - i));
    i = end;
  }
  return chunks;
}

}  // namespace ladder
