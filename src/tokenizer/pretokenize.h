// Pre-tokenization: the text is cut into chunks before BPE, and merges never
// cross a chunk boundary. This keeps tokens meaningful ("dog" and "dog." share
// the token for " dog") and makes encoding cacheable per chunk.
//
// The rule is GPT-2's regex, written by hand over bytes:
//   's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^\sLN]+|\s+(?!\S)|\s+
// where L (letters) is A-Z, a-z and every byte >= 0x80 (so UTF-8 words stay
// together), N is 0-9, and \s is space, \t, \n, \v, \f, \r. A single space
// attaches to the run that follows it; a run of whitespace before a non-space
// gives up its last character to that run.
//
// The chunks partition the input exactly: their concatenation is the text,
// whatever bytes it holds.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace ladder {

// Views into `text`, in order.
std::vector<absl::string_view> SplitChunks(absl::string_view text);

// Length of the English contraction GPT-2's rule splits off ('s 't 're 've
// 'm 'll 'd, lower case only) at text[i], or 0. Shared with GPT-2's exact
// pre-tokenizer (gpt2_pretokenize.h): the contractions are ASCII in both.
size_t ContractionAt(absl::string_view text, size_t i);

}  // namespace ladder
