// GPT-2's pre-tokenization, exactly: the text is cut into chunks by the
// regex of GPT-2's encoder.py (Python `regex` module),
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// applied over Unicode code points, written by hand:
//   \p{L}  general category L (Lu Ll Lt Lm Lo), from ICU
//   \p{N}  general category N (Nd Nl No), from ICU
//   \s     the Unicode White_Space property (ICU's u_isUWhiteSpace), which is
//          what the `regex` module's \s matches in a str pattern: \t \n \v
//          \f \r, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
//          U+2029, U+202F, U+205F, U+3000 (not U+001C..U+001F, which only
//          Python's `re` counts)
// The contractions are case-sensitive ("'S" is not one), as in GPT-2. The
// optional leading space is U+0020 only. A run of whitespace before a
// non-space gives up its last code point to what follows ("a  b" is "a",
// " ", " b"); at the end of the text it stays whole.
//
// Text is decoded as UTF-8. The reference only ever sees valid text; here
// every byte that does not start a well-formed sequence (byte_unicode.h
// DecodeUtf8) is a code point of its own in the "other" class, so any bytes
// are cut somewhere and round trips stay exact.
//
// This is not ladder's own rule (pretokenize.h), which classifies bytes;
// ladder's format keeps that one so its models keep their ids.
//
// The chunks partition the input exactly: their concatenation is the text.
#pragma once

#include <vector>

#include "absl/strings/string_view.h"

namespace ladder {

// Views into `text`, in order.
std::vector<absl::string_view> SplitGpt2Chunks(absl::string_view text);

}  // namespace ladder
