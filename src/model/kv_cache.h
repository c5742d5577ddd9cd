// The values of a paged KV cache for one model: per transformer layer, the
// keys and the values of every cached token, [blocks x 16, C] each, in the
// blocks a KvBlockPool (src/serve/kv_blocks.h) hands out. Position p of a
// sequence is row table[p / 16] * 16 + p % 16 (backend.h, "paged KV cache").
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/gpt_config.h"

namespace ladder {

class KvCache {
 public:
  static constexpr int kBlockTokens = 16;

  static absl::StatusOr<KvCache> Create(const GptConfig& cfg, Backend* backend, int num_blocks);

  int num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return bytes_; }
  Tensor k(int layer) const { return k_[layer]; }
  Tensor v(int layer) const { return v_[layer]; }

 private:
  int num_blocks_ = 0;
  int64_t bytes_ = 0;
  DeviceBuffer buffer_;
  std::vector<Tensor> k_, v_;
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
