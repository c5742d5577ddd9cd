// Paged KV-cache bookkeeping (PagedAttention, as in vLLM): which cache
// blocks hold which sequence's tokens. The cache itself (the K and V values)
// lives with the engine; this module only hands out block numbers.
//
// The cache is a pool of blocks of kBlockTokens token slots. Each sequence
// has a block table: logical block i (its tokens [16 i, 16 i + 16)) lives in
// physical block table[i], so a sequence grows a block at a time and never
// needs contiguous memory. Blocks are reference counted: a *full* block is
// named by a hash of its tokens and of every token before it, and a new
// sequence whose prompt starts with the same full blocks shares them instead
// of computing and storing them again (prefix caching). Only full blocks are
// shared, so a sequence only ever writes into its own last block and no
// block is ever copied.
//
// A block whose last user leaves keeps its contents and its name while it
// is "cached"; it is reused by a later identical prefix, or reclaimed (least
// recently released first) when no never-used block is left.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ladder {

inline constexpr int kBlockTokens = 16;

class KvBlockPool {
 public:
  using SequenceId = int64_t;

  explicit KvBlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks some sequence holds; the rest are free (never used or cached).
  int used_blocks() const { return used_; }
  int free_blocks() const { return num_blocks() - used_; }

  // Blocks a sequence of `tokens` tokens needs.
  static int BlocksFor(int64_t tokens) {
    return static_cast<int>((tokens + kBlockTokens - 1) / kBlockTokens);
  }

  // A new sequence holding `prompt`: its leading full blocks are shared with
  // any sequence (or cached block) of the same prefix, the rest allocated.
  // ResourceExhausted, with nothing allocated, if the pool cannot hold it.
  // *shared_tokens (if non-null) receives how many leading tokens were
  // found already in the cache (their K and V need no computing).
  absl::StatusOr<SequenceId> AddSequence(absl::Span<const int32_t> prompt,
                                         int64_t* shared_tokens = nullptr);
  // Appends tokens (a decode step's output), allocating blocks as needed.
  // ResourceExhausted, with nothing changed, if the pool runs out.
  absl::Status Append(SequenceId seq, absl::Span<const int32_t> tokens);
  // Releases the sequence's blocks. NotFound for an unknown id.
  absl::Status Free(SequenceId seq);

  // The sequence's block table (empty for an unknown id) and length.
  const std::vector<int32_t>& BlockTable(SequenceId seq) const;
  // The tables of `seqs` as one row-major [seqs, max_blocks] array, unused
  // entries -1: what Gpt::ForwardCached takes (CachedTokens::block_tables).
  std::vector<int32_t> BlockTables(absl::Span<const SequenceId> seqs, int max_blocks) const;
  int64_t Length(SequenceId seq) const;

 private:
  struct Block {
    int refs = 0;
    bool named = false;  // full, with a prefix hash in cached_by_hash_
    uint64_t hash = 0;
    // What the name stands for, checked on every match (a 64-bit hash
    // collision must not hand out another prefix's cache).
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;  // position in released_ while refs == 0 and named
  };
  struct Sequence {
    std::vector<int32_t> table;
    std::vector<int32_t> tokens;
    uint64_t hash = 0;  // prefix hash after the last full block
  };

  // A block for new contents: never used first, then the least recently
  // released cached one (forgetting its name). -1 if none.
  int32_t TakeBlock();
  void Acquire(int32_t b);
  void Release(int32_t b);
  // Names the sequence's block `index` (now full) so later prefixes can find it.
  void Name(Sequence& s, int index);

  std::vector<Block> blocks_;
  std::vector<int32_t> never_used_;
  std::list<int32_t> released_;  // named blocks with refs == 0, oldest first
  std::unordered_map<uint64_t, int32_t> cached_by_hash_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 0;
  int used_ = 0;
};

}  // namespace ladder
