// Byte-level byte-pair encoding (BPE), as in GPT-2.
//
// Ids 0..255 are the raw bytes, so every byte string has an encoding and
// Decode(Encode(s)) == s for any s (invalid UTF-8 and NULs included). Merge i
// joins the pair (a, b) into the new id 256 + i; a and b are always smaller
// ids. Text is first cut into chunks (pretokenize.h) and merges never cross a
// chunk boundary.
//
// Training counts the distinct chunks once, then repeatedly merges the most
// frequent adjacent pair, updating pair counts incrementally. Ties go to the
// smallest pair (a, then b), so training is deterministic. Encoding applies
// merges to each chunk in merge order (lowest rank first, leftmost first),
// which reproduces exactly the segmentation training saw.
//
// Tokenizer file (docs/formats.md, "Tokenizer file"):
//   ladder-bpe 1
//   vocab_size N
//   a b            one line per merge, N - 256 lines, in merge order
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ladder {

class Tokenizer {
 public:
  // Far above any useful vocabulary; bounds what a corrupt file can allocate.
  static constexpr int kMaxVocabSize = 1 << 24;

  // Bytes only: vocab 256, no merges.
  static Tokenizer ByteLevel();

  // Learns up to vocab_size - 256 merges from `text`. Stops early when no
  // adjacent pair is left to merge (text too small), so vocab_size() may come
  // out smaller than asked. InvalidArgument unless 256 <= vocab_size <=
  // kMaxVocabSize.
  static absl::StatusOr<Tokenizer> Train(absl::string_view text, int vocab_size);

  // Reads a tokenizer file; every error names the file and line.
  static absl::StatusOr<Tokenizer> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;

  std::vector<int32_t> Encode(absl::string_view text) const;
  // InvalidArgument naming the first id outside [0, vocab_size()).
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The bytes of one token; id must be in [0, vocab_size()).
  const std::string& TokenBytes(int32_t id) const { return tokens_[id]; }
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  // merges()[i] is the pair that id 256 + i stands for.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  Tokenizer();
  void AddMerge(int32_t a, int32_t b);
  void EncodeChunk(absl::string_view chunk, std::vector<int32_t>* out) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> tokens_;              // bytes of each id
  std::unordered_map<uint64_t, int32_t> ranks_;  // PairKey(a, b) -> merge index
};

}  // namespace ladder
