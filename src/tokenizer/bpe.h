// Byte-level byte-pair encoding (BPE), in two kinds behind one class:
//
// ladder's own (TokenizerKind::kLadder): ids 0..255 are the raw bytes, so
// every byte string has an encoding and Decode(Encode(s)) == s for any s
// (invalid UTF-8 and NULs included). Merge i joins the pair (a, b) into the
// new id 256 + i; a and b are always smaller ids. Text is first cut into
// chunks (pretokenize.h) and merges never cross a chunk boundary.
//
// GPT-2's (TokenizerKind::kGpt2, read from vocab.json + merges.txt; see
// gpt2_files.cc and docs/formats.md): ids are whatever vocab.json says, each
// byte has a one-byte token somewhere, merge i joins (a, b) into the id whose
// bytes are a's then b's. Text is cut by GPT-2's exact pre-tokenizer
// (gpt2_pretokenize.h). `<|endoftext|>`, when the vocabulary has it, is a
// special token: its literal text in a prompt encodes to its one id (never
// through the pre-tokenizer), it decodes back to that text, and generation
// ends at it (end_of_text()). Round trips are exact for any bytes here too.
//
// Training (ladder's kind only) counts the distinct chunks once, then
// repeatedly merges the most frequent adjacent pair, updating pair counts
// incrementally. Ties go to the smallest pair (a, then b), so training is
// deterministic.
//
// Encoding (both kinds) is GPT-2's `bpe()`: within a chunk, take the lowest
// ranked adjacent pair, merge every occurrence of it left to right, repeat
// until no pair has a rank. For ladder's merges this reproduces exactly the
// segmentation training saw.
//
// Tokenizer file (docs/formats.md, "Tokenizer file"), ladder's kind:
//   ladder-bpe 1
//   vocab_size N
//   a b            one line per merge, N - 256 lines, in merge order
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ladder {

enum class TokenizerKind { kLadder, kGpt2 };

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

  // Reads ladder's tokenizer file (tokenizer.bpe); every error names the file
  // and line. GPT-2's vocab.json + merges.txt go through LoadGpt2.
  static absl::StatusOr<Tokenizer> Load(const std::string& path);
  // Writes ladder's tokenizer file; FailedPrecondition for GPT-2's kind,
  // which has its own pair of files (SaveGpt2).
  absl::Status Save(const std::string& path) const;

  // GPT-2's vocab.json + merges.txt (implemented in gpt2_files.cc). Load
  // refuses, with a one-line error naming the file and the key or line:
  // malformed JSON, a key that is not spelled in GPT-2's byte alphabet
  // (byte_unicode.h), ids that are not exactly 0..N-1 (duplicates, out of
  // range), a byte with no token, a malformed merge line, a merge whose
  // parts or result are not in the vocabulary, a duplicate merge.
  static absl::StatusOr<Tokenizer> LoadGpt2(const std::string& vocab_path,
                                            const std::string& merges_path);
  // GPT-2's kind from its tokens' bytes alone (as llm.c's tokenizer file
  // holds them; end_of_text: that token's id, or -1), recovering the
  // merges the way GPT-2's vocabulary is ordered: every one-byte token is a
  // byte, and each longer token, in id order, is the merge of the two tokens
  // that BPE with the merges recovered so far cuts its bytes into.
  // InvalidArgument naming the id when a byte has no token, a byte has two,
  // or a token is not such a merge (then the vocabulary is not GPT-2's
  // kind of ordering).
  static absl::StatusOr<Tokenizer> FromGpt2TokenBytes(std::vector<std::string> tokens,
                                                      int32_t end_of_text);
  // Writes those two files (vocab.json in id order), both staged before
  // either replaces an old one (WriteFilesAtomically). Works for both kinds:
  // a ladder tokenizer written this way loads back as GPT-2's kind, with the
  // same tokens and merges but GPT-2's pre-tokenizer.
  absl::Status SaveGpt2(const std::string& vocab_path, const std::string& merges_path) const;
  // What SaveGpt2 writes, for a caller that writes them with other files;
  // Gpt2Tokens' FailedPrecondition, as "cannot write 'vocab_path': ...".
  struct Gpt2Files {
    std::string vocab_json, merges_txt;
  };
  absl::StatusOr<Gpt2Files> Gpt2FileContents(const std::string& vocab_path) const;
  // The tokens and merges as GPT-2's files spell them (byte_unicode.h; the
  // end-of-text token literally): token i's string, and each merge as
  // "a b" in rank order. What SaveGpt2 writes, and what GGUF's tokenizer
  // keys hold. FailedPrecondition if two ids spell the same token (BPE
  // training can reach the same bytes by two merge paths; ladder's format
  // keeps both ids, GPT-2's cannot).
  absl::StatusOr<std::vector<std::string>> Gpt2Tokens() const;
  std::vector<std::string> Gpt2Merges() const;

  // The literal text of GPT-2's end-of-text special token.
  static constexpr absl::string_view kEndOfText = "<|endoftext|>";

  std::vector<int32_t> Encode(absl::string_view text) const;
  // InvalidArgument naming the first id outside [0, vocab_size()).
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The bytes of one token; id must be in [0, vocab_size()).
  const std::string& TokenBytes(int32_t id) const { return tokens_[id]; }
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  // merges()[i] is the pair of ids joined at rank i: into id 256 + i for
  // ladder's kind, into merge_result(i) in general.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  int32_t merge_result(size_t rank) const { return merge_ids_[rank]; }
  // The id of the one-byte token for byte b (b itself for ladder's kind).
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }

  TokenizerKind kind() const { return kind_; }
  // The id that ends a generation and that kEndOfText encodes to, or -1
  // (ladder's kind has none).
  int32_t end_of_text() const { return end_of_text_; }

 private:
  Tokenizer();
  void AddMerge(int32_t a, int32_t b);
  void EncodePlain(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodeChunk(absl::string_view chunk, std::vector<int32_t>* out) const;

  TokenizerKind kind_ = TokenizerKind::kLadder;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<int32_t> merge_ids_;               // rank -> the id it makes
  std::vector<std::string> tokens_;              // bytes of each id
  std::array<int32_t, 256> byte_ids_;            // byte -> its one-byte id
  std::unordered_map<uint64_t, int32_t> ranks_;  // PairKey(a, b) -> merge index
  int32_t end_of_text_ = -1;
};

}  // namespace ladder
