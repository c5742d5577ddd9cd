#include "src/serve/kv_blocks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ladder {
namespace {

// The name of a full block: its tokens chained onto the name of the prefix
// before it (SplitMix64 finalizer per token).
uint64_t Chain(uint64_t h, absl::Span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h;
}

const std::vector<int32_t> kNoTable;

}  // namespace

KvBlockPool::KvBlockPool(int num_blocks, int caches)
    : all_caches_((1u << std::clamp(caches, 1, kMaxCaches)) - 1), blocks_(std::max(0, num_blocks)) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) never_used_.push_back(b);
}

int32_t KvBlockPool::TakeBlock() {
  if (!never_used_.empty()) {
    const int32_t b = never_used_.back();
    never_used_.pop_back();
    blocks_[b].filled = 0;  // (an unnamed block may have been marked in its last use)
    return b;
  }
  if (released_.empty()) return -1;
  const int32_t b = released_.front();
  released_.pop_front();
  Block& blk = blocks_[b];
  auto it = cached_by_hash_.find(blk.hash);
  if (it != cached_by_hash_.end() && it->second == b) cached_by_hash_.erase(it);
  blk.named = false;
  blk.filled = 0;
  blk.tokens.clear();
  return b;
}

void KvBlockPool::Acquire(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.refs++ == 0) {
    ++used_;
    if (blk.named) released_.erase(blk.lru);
  }
}

void KvBlockPool::Release(int32_t b) {
  Block& blk = blocks_[b];
  if (--blk.refs > 0) return;
  --used_;
  if (blk.named && blk.filled != all_caches_) {
    // Nobody will fill it now: drop the name, so that another block of the
    // same prefix can take it.
    auto it = cached_by_hash_.find(blk.hash);
    if (it != cached_by_hash_.end() && it->second == b) cached_by_hash_.erase(it);
    blk.named = false;
    blk.tokens.clear();
  }
  if (blk.named) {
    blk.lru = released_.insert(released_.end(), b);
  } else {
    never_used_.push_back(b);
  }
}

void KvBlockPool::Name(Sequence& s, int index) {
  absl::Span<const int32_t> tokens(s.tokens.data() + int64_t{index} * kBlockTokens, kBlockTokens);
  const uint64_t parent = s.hash;
  s.hash = Chain(parent, tokens);
  if (cached_by_hash_.count(s.hash)) return;  // the same prefix is already cached elsewhere
  Block& blk = blocks_[s.table[index]];
  blk.named = true;
  blk.hash = s.hash;
  blk.parent = parent;
  blk.tokens.assign(tokens.begin(), tokens.end());
  cached_by_hash_[s.hash] = s.table[index];
}

absl::StatusOr<KvBlockPool::SequenceId> KvBlockPool::AddSequence(absl::Span<const int32_t> prompt,
                                                                 int64_t* shared_tokens,
                                                                 bool reuse_cache) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int full = static_cast<int>(n / kBlockTokens);
  // The longest prefix of filled full blocks already cached, short of the
  // block holding the last token.
  const int shareable = reuse_cache && n > 0 ? static_cast<int>((n - 1) / kBlockTokens) : 0;
  std::vector<int32_t> shared;
  uint64_t h = 0;
  for (int i = 0; i < shareable; ++i) {
    absl::Span<const int32_t> tokens = prompt.subspan(int64_t{i} * kBlockTokens, kBlockTokens);
    const uint64_t next = Chain(h, tokens);
    auto it = cached_by_hash_.find(next);
    if (it == cached_by_hash_.end()) break;
    const Block& blk = blocks_[it->second];
    if (blk.filled != all_caches_ || blk.parent != h ||
        !std::equal(tokens.begin(), tokens.end(), blk.tokens.begin())) {
      break;
    }
    shared.push_back(it->second);
    h = next;
  }
  // Admission: the fresh blocks must come from blocks nobody holds (a
  // cached block about to be shared does not count as free for them).
  int64_t reusable = 0;
  for (int32_t b : shared) reusable += blocks_[b].refs == 0 ? 1 : 0;
  const int64_t fresh = BlocksFor(n) - static_cast<int64_t>(shared.size());
  const int64_t available = static_cast<int64_t>(never_used_.size() + released_.size()) - reusable;
  if (fresh > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV cache has ", available, " free blocks, the prompt needs ", fresh));
  }
  Sequence s;
  s.tokens.assign(prompt.begin(), prompt.end());
  s.hash = h;
  for (int32_t b : shared) {
    Acquire(b);
    s.table.push_back(b);
  }
  std::fill(std::begin(s.filled), std::end(s.filled), static_cast<int>(shared.size()));
  for (int64_t i = 0; i < fresh; ++i) {
    const int32_t b = TakeBlock();
    Acquire(b);
    s.table.push_back(b);
    if (static_cast<int>(s.table.size()) <= full) Name(s, static_cast<int>(s.table.size()) - 1);
  }
  if (shared_tokens != nullptr) *shared_tokens = static_cast<int64_t>(shared.size()) * kBlockTokens;
  const SequenceId id = next_id_++;
  sequences_.emplace(id, std::move(s));
  return id;
}

absl::Status KvBlockPool::Append(SequenceId seq, absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  const int64_t length = static_cast<int64_t>(s.tokens.size());
  const int64_t fresh = BlocksFor(length + static_cast<int64_t>(tokens.size())) -
                        static_cast<int64_t>(s.table.size());
  if (fresh > static_cast<int64_t>(never_used_.size() + released_.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV cache is full: sequence ", seq, " needs ", fresh, " more blocks"));
  }
  for (int32_t t : tokens) {
    if (s.tokens.size() == s.table.size() * kBlockTokens) {
      const int32_t b = TakeBlock();
      Acquire(b);
      s.table.push_back(b);
    }
    s.tokens.push_back(t);
    if (s.tokens.size() % kBlockTokens == 0) {
      Name(s, static_cast<int>(s.tokens.size() / kBlockTokens) - 1);
    }
  }
  return absl::OkStatus();
}

void KvBlockPool::MarkFilled(SequenceId seq, int cache, int64_t tokens) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || cache < 0 || cache >= kMaxCaches) return;
  if ((all_caches_ & (1u << cache)) == 0) return;  // not one of this pool's caches
  Sequence& s = it->second;
  const int64_t full =
      std::min<int64_t>(tokens, static_cast<int64_t>(s.tokens.size())) / kBlockTokens;
  for (int& i = s.filled[cache]; i < full; ++i) blocks_[s.table[i]].filled |= 1u << cache;
}

absl::Status KvBlockPool::Free(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  // Last blocks first: the prefix, shared the most, is released last and so
  // stays cached the longest.
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b) Release(*b);
  sequences_.erase(it);
  return absl::OkStatus();
}

const std::vector<int32_t>& KvBlockPool::BlockTable(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? kNoTable : it->second.table;
}

std::vector<int32_t> KvBlockPool::BlockTables(absl::Span<const SequenceId> seqs,
                                              int max_blocks) const {
  std::vector<int32_t> tables(seqs.size() * static_cast<size_t>(max_blocks), -1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<int32_t>& t = BlockTable(seqs[s]);
    std::copy_n(t.begin(), std::min<size_t>(t.size(), max_blocks), tables.begin() + s * max_blocks);
  }
  return tables;
}

int64_t KvBlockPool::Length(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : static_cast<int64_t>(it->second.tokens.size());
}

}  // namespace ladder
