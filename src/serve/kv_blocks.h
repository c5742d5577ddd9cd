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
// of computing and storing them again (prefix caching).
//
// A block is shared only once it is *filled*: the caller has written its
// keys and values into every one of the pool's caches (the target model's,
// and with speculative decoding the draft's; MarkFilled). Naming happens
// when a block's tokens are known, before any forward has run them, so a
// named block is not yet worth sharing; and once filled, nobody writes into
// it again, so every sharer reads the same rows. A prompt's last token never
// lies in a shared block: whoever runs the prompt must put that token
// through the model (its logits give the first sampled token), which writes
// its row, and that write must land in a block of its own. So a sequence
// only ever writes into blocks no other sequence reads, and no block is ever
// copied.
//
// A block whose last user leaves keeps its contents and its name while it
// is "cached" (if filled; an unfilled one forgets its name, since nobody
// will fill it now); it is reused by a later identical prefix, or reclaimed
// (least recently released first, its name and filled marks cleared) when
// no never-used block is left.
//
// Not thread-safe: one thread (the engine's) owns the pool.
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

  // Caches the pool's blocks index: a block is filled when all of them
  // hold it (the engine: 1, or 2 with a draft model).
  static constexpr int kMaxCaches = 2;

  // `caches` in [1, kMaxCaches] (clamped).
  explicit KvBlockPool(int num_blocks, int caches = 1);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks some sequence holds; the rest are free (never used or cached).
  int used_blocks() const { return used_; }
  int free_blocks() const { return num_blocks() - used_; }

  // Blocks a sequence of `tokens` tokens needs.
  static int BlocksFor(int64_t tokens) {
    return static_cast<int>((tokens + kBlockTokens - 1) / kBlockTokens);
  }

  // A new sequence holding `prompt`. With `reuse_cache`, its leading full
  // blocks that are named and filled for the same prefix (in any sequence,
  // or cached) and lie wholly before the prompt's last token are shared;
  // the rest are allocated (and the full ones named, for later prompts).
  // Without it nothing is shared: a caller that must run every prompt token
  // through the model (to score it) uses private blocks. ResourceExhausted,
  // with nothing allocated, if the pool cannot hold it. *shared_tokens (if
  // non-null) receives how many leading tokens were shared: a multiple of
  // kBlockTokens, at most prompt.size() - 1, whose keys and values are in
  // every cache already, so the caller computes from there on.
  absl::StatusOr<SequenceId> AddSequence(absl::Span<const int32_t> prompt,
                                         int64_t* shared_tokens = nullptr, bool reuse_cache = true);
  // Records that cache `cache` (in [0, caches); others are ignored) now
  // holds the keys and values of the sequence's first `tokens` tokens (the
  // caller's forward has written them; tokens past the sequence's length are
  // ignored). Its full blocks among them become shareable once every cache
  // holds them. A caller that never calls it shares nothing: that is how
  // prefix caching is turned off. No-op for an unknown id.
  void MarkFilled(SequenceId seq, int cache, int64_t tokens);
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
    uint32_t filled = 0;  // bit c: cache c holds the block's keys and values
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
    int filled[kMaxCaches] = {};  // leading blocks marked filled, per cache
  };

  // A block for new contents: never used first, then the least recently
  // released cached one (forgetting its name). -1 if none.
  int32_t TakeBlock();
  void Acquire(int32_t b);
  void Release(int32_t b);
  // Names the sequence's block `index` (now full) so later prefixes can find it.
  void Name(Sequence& s, int index);

  uint32_t all_caches_;  // the `filled` mask of a shareable block
  std::vector<Block> blocks_;
  std::vector<int32_t> never_used_;
  std::list<int32_t> released_;  // named blocks with refs == 0, oldest first
  std::unordered_map<uint64_t, int32_t> cached_by_hash_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 0;
  int used_ = 0;
};

}  // namespace ladder
