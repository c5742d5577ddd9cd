#include "src/tokenizer/byte_unicode.h"

#include <array>

namespace ladder {
namespace {

bool StandsForItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_code_point;
  std::array<int16_t, 0x144> to_byte;  // every mapped code point is below U+0144
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    t.to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = StandsForItself(b) ? static_cast<char32_t>(b) : next++;
      t.to_code_point[b] = c;
      t.to_byte[c] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t b) { return GetTables().to_code_point[b]; }

int CodePointToByte(char32_t c) {
  const Tables& t = GetTables();
  return c < t.to_byte.size() ? t.to_byte[c] : -1;
}

std::string BytesToSymbols(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(ByteToCodePoint(b), &out);
  return out;
}

std::optional<std::string> SymbolsToBytes(absl::string_view symbols) {
  std::string out;
  for (size_t i = 0; i < symbols.size();) {
    char32_t c = 0;
    const int len = DecodeUtf8(symbols, i, &c);
    if (len == 0) return std::nullopt;
    const int b = CodePointToByte(c);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

int DecodeUtf8(absl::string_view text, size_t i, char32_t* c) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    *c = lead;
    return 1;
  }
  int trailing;
  char32_t value;
  unsigned char lo = 0x80, hi = 0xBF;  // the range allowed for the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    trailing = 1;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    trailing = 2;
    value = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    trailing = 3;
    value = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;  // no overlong forms
    if (lead == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + static_cast<size_t>(trailing) >= text.size()) return 0;  // truncated
  for (int k = 1; k <= trailing; ++k) {
    const unsigned char b = byte(i + static_cast<size_t>(k));
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  *c = value;
  return trailing + 1;
}

}  // namespace ladder
