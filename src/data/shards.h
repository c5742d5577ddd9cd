// Token shard files: a tokenized corpus on disk, read back without the
// tokenizer or the text (docs/formats.md, "Token shards").
//
// Layout: a 1024-byte header of 256 little-endian int32
//   [0] magic 0x4B4F544C (the bytes "LTOK")   [1] version 1
//   [2] token count                            [3] bytes per token: 2 if
//   [4] vocab size                                 vocab size <= 65536, else 4
//   [5..255] zero
// then the tokens, little-endian unsigned, `bytes per token` each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ladder {

// Every token must lie in [0, vocab_size). Writes path.tmp, then renames it
// over path, so a reader never sees half a shard.
absl::Status WriteShard(const std::string& path, const std::vector<int32_t>& tokens,
                        int vocab_size);

// Validates the header (magic, version, token width, vocab size), that the
// file size matches the token count, and that every token is below the vocab
// size; errors name the file.
absl::StatusOr<std::vector<int32_t>> ReadShard(const std::string& path);

}  // namespace ladder
