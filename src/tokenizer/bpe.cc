#include "src/tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/tokenizer/gpt2_pretokenize.h"
#include "src/tokenizer/pretokenize.h"

namespace ladder {
namespace {

constexpr absl::string_view kMagic = "ladder-bpe";
constexpr int kVersion = 1;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct ChunkHash {
  size_t operator()(absl::string_view s) const {
    return std::hash<std::string_view>()(std::string_view(s.data(), s.size()));
  }
};

}  // namespace

Tokenizer::Tokenizer() {
  tokens_.reserve(256);
  for (int b = 0; b < 256; ++b) {
    tokens_.emplace_back(1, static_cast<char>(b));
    byte_ids_[b] = b;
  }
}

Tokenizer Tokenizer::ByteLevel() { return Tokenizer(); }

void Tokenizer::AddMerge(int32_t a, int32_t b) {
  ranks_.emplace(PairKey(a, b), static_cast<int32_t>(merges_.size()));
  merges_.emplace_back(a, b);
  merge_ids_.push_back(static_cast<int32_t>(tokens_.size()));
  tokens_.push_back(tokens_[a] + tokens_[b]);
}

absl::StatusOr<Tokenizer> Tokenizer::Train(absl::string_view text, int vocab_size) {
  if (vocab_size < 256 || vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat("vocab size ", vocab_size, " outside [256, ",
                                                   kMaxVocabSize, "] (256 is one id per byte)"));
  }
  Tokenizer tok;
  if (vocab_size == 256) return tok;

  // Natural text has few distinct chunks: work on those, weighted by count.
  // Each is a linked list of symbols; merging a pair rewrites only the
  // places where it occurs, so the total work follows the number of merges
  // made, not the length of the chunks (a 3 MB chunk of unspaced text costs
  // little more than 3 MB of words).
  std::unordered_map<absl::string_view, int64_t, ChunkHash> chunk_counts;
  for (absl::string_view chunk : SplitChunks(text)) ++chunk_counts[chunk];
  struct Word {
    std::vector<int32_t> sym;         // -1 once absorbed into its left neighbor
    std::vector<int32_t> prev, next;  // -1 / size() mean none
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [chunk, count] : chunk_counts) {
    if (chunk.size() < 2) continue;  // nothing to merge
    const int32_t n = static_cast<int32_t>(chunk.size());
    Word w{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n), count};
    for (int32_t i = 0; i < n; ++i) {
      w.sym[i] = static_cast<unsigned char>(chunk[i]);
      w.prev[i] = i - 1;
      w.next[i] = i + 1;
    }
    words.push_back(std::move(w));
  }

  // pair_counts: occurrences of each adjacent pair, weighted by word count.
  // sites: where each pair occurs (word, position of its left symbol); holds
  // every current occurrence, plus stale ones that are skipped when met.
  struct Site {
    int32_t word, pos;
    bool operator<(const Site& o) const { return word != o.word ? word < o.word : pos < o.pos; }
  };
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<Site>> sites;
  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w) {
    const std::vector<int32_t>& s = words[w].sym;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(s.size()); ++i) {
      const uint64_t key = PairKey(s[i], s[i + 1]);
      pair_counts[key] += words[w].count;
      sites[key].push_back({w, i});
    }
  }
  // Max-heap on (count, then smallest pair) with lazy deletion: an entry is
  // live only while its count equals the pair's current count.
  struct Candidate {
    int64_t count;
    uint64_t pair;
  };
  auto worse = [](const Candidate& x, const Candidate& y) {
    return x.count != y.count ? x.count < y.count : x.pair > y.pair;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
  for (const auto& [pair, count] : pair_counts) heap.push({count, pair});

  std::vector<uint64_t> changed;
  while (tok.vocab_size() < vocab_size && !heap.empty()) {
    const Candidate best = heap.top();
    heap.pop();
    auto live = pair_counts.find(best.pair);
    if (live == pair_counts.end() || live->second != best.count) continue;
    const int32_t a = static_cast<int32_t>(best.pair >> 32);
    const int32_t b = static_cast<int32_t>(best.pair & 0xffffffffu);
    const int32_t id = tok.vocab_size();
    tok.AddMerge(a, b);
    pair_counts.erase(live);  // every occurrence is merged below
    std::vector<Site> todo = std::move(sites[best.pair]);
    sites.erase(best.pair);
    // Left to right within a word, as Encode applies a merge: in "aaa" the
    // pair (a, a) merges at 0, and the occurrence at 1 is then gone.
    std::sort(todo.begin(), todo.end());

    changed.clear();
    auto update = [&](int32_t x, int32_t y, int64_t delta) {
      const uint64_t key = PairKey(x, y);
      if (key == best.pair) return;
      pair_counts[key] += delta;
      changed.push_back(key);
    };
    for (const Site& site : todo) {
      Word& w = words[site.word];
      const int32_t size = static_cast<int32_t>(w.sym.size());
      const int32_t i = site.pos;
      const int32_t j = w.next[i];
      if (w.sym[i] != a || j >= size || w.sym[j] != b) continue;  // stale
      if (const int32_t p = w.prev[i]; p >= 0) {
        update(w.sym[p], a, -w.count);
        update(w.sym[p], id, w.count);
        sites[PairKey(w.sym[p], id)].push_back({site.word, p});
      }
      const int32_t q = w.next[j];
      if (q < size) {
        update(b, w.sym[q], -w.count);
        update(id, w.sym[q], w.count);
        sites[PairKey(id, w.sym[q])].push_back({site.word, i});
        w.prev[q] = i;
      }
      w.sym[i] = id;
      w.sym[j] = -1;
      w.next[i] = q;
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (uint64_t key : changed) {
      auto it = pair_counts.find(key);
      if (it->second > 0) {
        heap.push({it->second, key});
      } else {
        pair_counts.erase(it);
        sites.erase(key);
      }
    }
  }
  return tok;
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 2);
  if (end_of_text_ >= 0) {
    // The special token is cut out before pre-tokenization sees the text.
    for (size_t at; (at = text.find(kEndOfText)) != absl::string_view::npos;) {
      EncodePlain(text.substr(0, at), &out);
      out.push_back(end_of_text_);
      text.remove_prefix(at + kEndOfText.size());
    }
  }
  EncodePlain(text, &out);
  return out;
}

void Tokenizer::EncodePlain(absl::string_view text, std::vector<int32_t>* out) const {
  if (merges_.empty()) {
    for (unsigned char c : text) out->push_back(byte_ids_[c]);
    return;
  }
  // Natural text repeats a few thousand chunks over and over.
  std::unordered_map<absl::string_view, std::vector<int32_t>, ChunkHash> cache;
  const std::vector<absl::string_view> chunks =
      kind_ == TokenizerKind::kGpt2 ? SplitGpt2Chunks(text) : SplitChunks(text);
  for (absl::string_view chunk : chunks) {
    auto [it, inserted] = cache.try_emplace(chunk);
    if (inserted) EncodeChunk(chunk, &it->second);
    out->insert(out->end(), it->second.begin(), it->second.end());
  }
}

// GPT-2's `bpe()`: the lowest ranked pair present is merged at every
// occurrence, left to right, before any other pair is looked at; then the
// next lowest, and so on. Over a linked list of symbols with a heap of
// (rank, position) this is O(n log n) even for a huge chunk: all entries of
// the lowest rank are taken off the heap together and applied in position
// order (a merge never creates its own pair again, since its result differs
// from both parts), and only then are the pairs they created pushed. Entries
// whose pair changed since they were pushed are skipped.
void Tokenizer::EncodeChunk(absl::string_view chunk, std::vector<int32_t>* out) const {
  const int n = static_cast<int>(chunk.size());
  std::vector<int32_t> sym(n);
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<unsigned char>(chunk[i])];
    prev[i] = i - 1;
    next[i] = i + 1;  // n means none
  }
  auto rank_of = [&](int i) {
    auto it = ranks_.find(PairKey(sym[i], sym[next[i]]));
    return it == ranks_.end() ? -1 : it->second;
  };
  using Entry = std::pair<int32_t, int>;  // (rank, position of the left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int i) {
    if (i >= 0 && next[i] < n) {
      if (int32_t r = rank_of(i); r >= 0) heap.emplace(r, i);
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<int> batch, touched;
  while (!heap.empty()) {
    const int32_t rank = heap.top().first;
    batch.clear();
    while (!heap.empty() && heap.top().first == rank) {
      batch.push_back(heap.top().second);
      heap.pop();
    }
    touched.clear();
    for (int i : batch) {
      // Stale if i was absorbed or its pair changed since the push.
      if (sym[i] < 0 || next[i] >= n || rank_of(i) != rank) continue;
      const int j = next[i];
      sym[i] = merge_ids_[rank];
      sym[j] = -1;
      next[i] = next[j];
      if (next[j] < n) prev[next[j]] = i;
      touched.push_back(i);
    }
    for (int i : touched) {
      if (sym[i] < 0) continue;
      push(prev[i]);
      push(i);
    }
  }
  for (int i = 0; i < n; i = next[i]) out->push_back(sym[i]);
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " out of range [0, ", vocab_size(), ")"));
    }
    out += tokens_[id];
  }
  return out;
}

absl::Status Tokenizer::Save(const std::string& path) const {
  if (kind_ != TokenizerKind::kLadder) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write '", path, "': a GPT-2 tokenizer is saved as vocab.json + merges.txt"));
  }
  std::string text = absl::StrCat(kMagic, " ", kVersion, "\nvocab_size ", vocab_size(), "\n");
  for (const auto& [a, b] : merges_) absl::StrAppend(&text, a, " ", b, "\n");
  return WriteFileAtomically(path, text);
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // final newline
  auto error = [&](size_t line_index, auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line_index + 1, ": ", parts...));
  };
  auto fields = [&](size_t i) -> std::vector<absl::string_view> {
    return absl::StrSplit(lines[i], ' ');
  };

  if (lines.empty()) return error(0, "empty file, expected '", kMagic, " ", kVersion, "'");
  std::vector<absl::string_view> f = fields(0);
  int version = 0;
  if (f.size() != 2 || f[0] != kMagic || !absl::SimpleAtoi(f[1], &version)) {
    return error(0, "not a ladder tokenizer file (expected '", kMagic, " ", kVersion, "')");
  }
  if (version != kVersion) {
    return error(0, "unsupported version ", version, " (this build reads ", kVersion, ")");
  }
  int64_t vocab = 0;
  if (lines.size() < 2 || (f = fields(1)).size() != 2 || f[0] != "vocab_size" ||
      !absl::SimpleAtoi(f[1], &vocab)) {
    return error(1, "expected 'vocab_size N'");
  }
  if (vocab < 256 || vocab > kMaxVocabSize) {
    return error(1, "vocab_size ", vocab, " outside [256, ", kMaxVocabSize, "]");
  }
  const size_t merges = static_cast<size_t>(vocab - 256);
  if (lines.size() - 2 != merges) {
    const size_t at = std::min(lines.size(), merges + 2);
    return error(at, "vocab_size ", vocab, " needs ", merges, " merge lines, found ",
                 lines.size() - 2);
  }
  Tokenizer tok;
  for (size_t i = 2; i < lines.size(); ++i) {
    const int32_t new_id = static_cast<int32_t>(256 + i - 2);
    int32_t a = 0, b = 0;
    f = fields(i);
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &a) || !absl::SimpleAtoi(f[1], &b)) {
      return error(i, "expected a merge 'a b' (two token ids), got '", lines[i], "'");
    }
    if (a < 0 || b < 0 || a >= new_id || b >= new_id) {
      return error(i, "merge ", a, " ", b, " creates id ", new_id, " so both ids must be in [0, ",
                   new_id, ")");
    }
    if (tok.ranks_.count(PairKey(a, b))) {
      return error(i, "duplicate merge ", a, " ", b);
    }
    tok.AddMerge(a, b);
  }
  return tok;
}

}  // namespace ladder
