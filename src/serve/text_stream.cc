#include "src/serve/text_stream.h"

#include <algorithm>
#include <utility>

namespace ladder {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The byte range allowed at position k (1-based) of a sequence led by `lead`.
bool ContinuationOk(unsigned char lead, int k, unsigned char b) {
  if (k == 1) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;  // no overlong forms
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;  // no surrogates
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;  // no overlong forms
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;  // nothing past U+10FFFF
  }
  return b >= 0x80 && b <= 0xBF;
}

// Bytes after the lead byte, or -1 for a byte that never starts a character.
int TrailingBytes(unsigned char lead) {
  if (lead < 0x80) return 0;
  if (lead >= 0xC2 && lead <= 0xDF) return 1;
  if (lead >= 0xE0 && lead <= 0xEF) return 2;
  if (lead >= 0xF0 && lead <= 0xF4) return 3;
  return -1;
}

}  // namespace

TextStream::TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops)
    : tokenizer_(tokenizer) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string TextStream::Push(int32_t token) {
  if (token == tokenizer_->end_of_text()) {
    std::string out = Finish();
    stopped_ = true;
    return out;
  }
  return PushBytes(tokenizer_->TokenBytes(token));
}

std::string TextStream::PushBytes(absl::string_view bytes) {
  if (stopped_ || finished_) return "";
  pending_.append(bytes.data(), bytes.size());
  Decode(/*flush=*/false);
  return Release(/*flush=*/false);
}

std::string TextStream::Finish() {
  if (stopped_ || finished_) return "";
  Decode(/*flush=*/true);
  std::string out = Release(/*flush=*/true);
  finished_ = true;
  return out;
}

void TextStream::Decode(bool flush) {
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const auto lead = static_cast<unsigned char>(pending_[i]);
    const int trailing = TrailingBytes(lead);
    if (trailing < 0) {
      held_.append(kReplacement);
      ++i;
      continue;
    }
    int k = 1;
    while (k <= trailing && i + k < n &&
           ContinuationOk(lead, k, static_cast<unsigned char>(pending_[i + k]))) {
      ++k;
    }
    if (k > trailing) {  // complete and valid
      held_.append(pending_, i, k);
      i += k;
    } else if (i + k < n) {  // a byte that does not fit: the prefix is invalid
      held_.append(kReplacement);
      i += k;
    } else if (flush) {  // incomplete at the very end, and nothing will follow
      held_.append(kReplacement);
      i = n;
    } else {
      break;  // incomplete at the end: wait for more bytes
    }
  }
  pending_.erase(0, i);
}

std::string TextStream::Release(bool flush) {
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    pending_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  if (!flush) {
    for (const std::string& s : stops_) {
      const size_t most = std::min(s.size() - 1, held_.size());
      for (size_t len = most; len > hold; --len) {
        if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

}  // namespace ladder
