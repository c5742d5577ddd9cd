// The values of a paged KV cache for one model: per transformer layer, the
// keys and the values of every cached token, [blocks x 16, C] each, in the
// blocks a KvBlockPool (src/serve/kv_blocks.h) hands out. Position p of a
// sequence is row table[p / 16] * 16 + p % 16 (backend.h, "paged KV cache").
// Stored as fp32, or as int8 with one scale per token and head (a quarter of
// the bytes plus 8 per token and head, so about 3.7x the tokens in the same
// memory at head size 64).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
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

  // A sequence's cached rows as plain bytes, to move them between caches of
  // the same model and format (prefill/decode disaggregation): positions
  // [0, tokens) of the sequence whose block table is `table`, laid out per
  // layer as its keys [tokens, C], its values [tokens, C] (f32 or i8), and
  // for int8 then the key scales [tokens, NH] and value scales [tokens, NH]
  // (f32): tokens * BytesPerToken bytes in all (docs/formats.md).
  // ReadRows replaces *out with them; WriteRows stores `rows` (exactly that
  // many bytes) into the sequence's rows, except those of its first
  // `keep_blocks` blocks (blocks the sequence shares with others through the
  // prefix cache, whose rows are already there and must not change under
  // their readers). InvalidArgument when the table is
  // too short for `tokens` or names a block outside the cache, or `rows`
  // has the wrong size. Called by the thread that runs the model, between
  // forwards.
  absl::Status ReadRows(absl::Span<const int32_t> table, int64_t tokens, std::string* out) const;
  absl::Status WriteRows(absl::Span<const int32_t> table, int64_t tokens, absl::string_view rows,
                         int64_t keep_blocks = 0);

  int num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return bytes_; }
  KvFormat format() const { return format_; }
  const PagedKv& layer(int l) const { return layers_[l]; }

 private:
  // Calls `copy(view, offset, block)` for every run of the sequence's rows
  // in each tensor of the cache, `offset` being where the run sits in the
  // row layout above and `block` its index in the table.
  template <typename CopyFn>
  absl::Status ForEachRowRun(absl::Span<const int32_t> table, int64_t tokens, CopyFn copy) const;

  Backend* backend_ = nullptr;
  int num_blocks_ = 0;
  int64_t bytes_ = 0;
  int64_t bytes_per_token_ = 0;
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
