// The values of a paged KV cache for one model: per transformer layer, the
// keys and the values of every cached token, [blocks x 16, C] each, in the
// blocks a KvBlockPool (src/serve/kv_blocks.h) hands out. Position p of a
// sequence is row table[p / 16] * 16 + p % 16 (backend.h, "paged KV cache").
// Stored as fp32, or as int8 with one scale per token and head (a quarter of
// the bytes plus 8 per token and head, so about 3.7x the tokens in the same
// memory at head size 64).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/backend/backend.h"
#include "src/model/gpt_config.h"

namespace ladder {

enum class KvFormat { kF32, kInt8 };

// "fp32" or "int8" (the --kv flag); InvalidArgument names anything else.
absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name);
const char* KvFormatName(KvFormat format);

class KvCache {
 public:
  static constexpr int kBlockTokens = 16;

  // The cache in memory of `backend` (its views carry backend->device()),
  // zero-filled; InvalidArgument for num_blocks <= 0.
  static absl::StatusOr<KvCache> Create(const GptConfig& cfg, Backend* backend, int num_blocks,
                                        KvFormat format = KvFormat::kF32);
  // Bytes one cached token takes over all layers (keys, values, scales).
  static int64_t BytesPerToken(const GptConfig& cfg, KvFormat format);

  int num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return bytes_; }
  KvFormat format() const { return format_; }
  const PagedKv& layer(int l) const { return layers_[l]; }

 private:
  int num_blocks_ = 0;
  int64_t bytes_ = 0;
  KvFormat format_ = KvFormat::kF32;
  DeviceBuffer buffer_;
  std::vector<PagedKv> layers_;
};

// New tokens of several sequences for one cached forward: token i is
// tokens[i] at position pos[i] of sequence seq[i] (an index into the block
// tables, [num_seqs x max_blocks] row-major; -1 pads unused entries). Their
// blocks must already be allocated for every position up to pos[i].
struct CachedTokens {
  std::vector<int32_t> tokens, seq, pos;
  std::vector<int32_t> block_tables;
  int max_blocks = 0;
};

}  // namespace ladder
