// Incremental detokenization for streaming: token ids go in one at a time,
// and out comes the text that is safe to show the client now.
//
// Two things are held back until they are resolved:
//   - an incomplete UTF-8 sequence at the end (a byte-level token may carry
//     only part of a character; the next token completes it). Bytes that can
//     never become a valid character are emitted as U+FFFD, one per maximal
//     invalid subpart (as WHATWG decoders do), so every delta is valid UTF-8.
//   - any suffix of the text that could be the start of a stop string.
// When a stop string appears, the text before it is the final delta and the
// stream is stopped: the stop string itself and anything after it are never
// emitted (OpenAI's behaviour). Finish() ends the stream, flushing what is
// held (an incomplete trailing sequence becomes one U+FFFD).
//
// The concatenation of all deltas is the decoded text cut before the first
// stop string, independent of how the bytes were split into tokens.
//
// The tokenizer's end-of-text token (Tokenizer::end_of_text(), GPT-2's
// `<|endoftext|>`) ends the generation: Push of it flushes what is held, as
// Finish does, and stops the stream; its text is never emitted. This is how
// `generate` and `serve` stop at it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

class TextStream {
 public:
  // `tokenizer` (may be null if only PushBytes is used) must outlive the
  // stream. Empty stop strings are ignored.
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops);

  // Appends one token's bytes (id in [0, vocab_size)); returns the delta.
  // The end-of-text token stops the stream instead.
  std::string Push(int32_t token);
  // Appends raw bytes; returns the delta. Once stopped, returns "".
  std::string PushBytes(absl::string_view bytes);
  // Ends the stream: returns everything still held (cut at a stop string if
  // one completes). Later calls return "".
  std::string Finish();

  // A stop string or the end-of-text token was found; nothing more will be
  // emitted.
  bool stopped() const { return stopped_; }

 private:
  // Moves the decodable prefix of pending_ into held_; with `flush`, an
  // incomplete trailing sequence too (as U+FFFD).
  void Decode(bool flush);
  // Cuts held_ at the earliest stop string and returns what may be emitted.
  std::string Release(bool flush);

  const Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  std::string pending_;  // raw bytes not yet decoded (an incomplete sequence)
  std::string held_;     // valid UTF-8 not yet emitted
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace ladder
