// A corpus as token ids, split into training and validation parts.
//
// A corpus is either a prepared directory (`ladder data prepare`: train.bin,
// val.bin, tokenizer.bpe) or any text file, tokenized on load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

// File names inside a prepared directory.
inline constexpr char kTrainShardName[] = "train.bin";
inline constexpr char kValShardName[] = "val.bin";
inline constexpr char kTokenizerName[] = "tokenizer.bpe";

inline constexpr double kDefaultValFraction = 0.05;
inline constexpr size_t kSplitBlockTokens = 4096;

struct TokenSplits {
  std::vector<int32_t> train, val;
};

// Cuts the stream into blocks of kSplitBlockTokens tokens and sends block b to
// validation when floor((b + 1) * f) > floor(b * f) (f = val_fraction): an
// evenly spread fraction f of the blocks, so both splits sample the whole text
// (a corpus in book order would otherwise validate on one book only). Block 0
// always trains. When the stream is too short to give validation a block, the
// block shrinks so each split still gets tokens (if there are enough tokens).
// f <= 0 puts everything in train. Requires f < 1.
TokenSplits SplitTrainVal(const std::vector<int32_t>& tokens, double val_fraction);

// Reads dir/train.bin and dir/val.bin.
absl::StatusOr<TokenSplits> LoadPrepared(const std::string& dir);

// `path` is a prepared directory (val_fraction is then ignored; its tokens
// must fit tok's vocabulary) or a text file, encoded with tok and split with
// SplitTrainVal. InvalidArgument if val_fraction is outside [0, 1).
absl::StatusOr<TokenSplits> LoadCorpus(const std::string& path, const Tokenizer& tok,
                                       double val_fraction);

}  // namespace ladder
