// GPT-2's byte-to-unicode mapping (`bytes_to_unicode` in its encoder.py):
// how vocab.json and merges.txt spell token bytes as printable text.
//
// The 188 printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand
// for themselves; the other 68 (control bytes, space, DEL, U+00A0, U+00AD and
// 0x80..0x9F) map in byte order to U+0100, U+0101, ... U+0143. So the space
// is 'Ġ' (U+0120) and the newline 'Ċ' (U+010A). The mapping is a bijection
// between the 256 bytes and 256 code points; a token's text in the files is
// the UTF-8 of the mapped code points of its bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ladder {

// The code point that stands for byte b.
char32_t ByteToCodePoint(uint8_t b);
// The byte that code point c stands for, or -1 if c is none of the 256.
int CodePointToByte(char32_t c);

// The UTF-8 spelling of `bytes`, one mapped code point per byte.
std::string BytesToSymbols(absl::string_view bytes);
// The inverse: nullopt if `symbols` is not valid UTF-8 or holds a code point
// outside the 256.
std::optional<std::string> SymbolsToBytes(absl::string_view symbols);

// Appends the UTF-8 encoding of c (at most U+10FFFF, no surrogates).
void AppendUtf8(char32_t c, std::string* out);
// The length of the well-formed UTF-8 sequence at text[i] (setting *c), or 0
// if none starts there (overlong forms, surrogates, values past U+10FFFF,
// stray continuation bytes and truncated sequences are all ill-formed).
int DecodeUtf8(absl::string_view text, size_t i, char32_t* c);

}  // namespace ladder
