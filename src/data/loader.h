// Deterministic training batches over a token stream.
//
// The stream is cut into windows of context + 1 tokens with stride context
// (window w is tokens [w*T, w*T + T], T = context); a row's inputs are the
// window's first T tokens and its targets the last T. Each epoch visits every
// window exactly once, in an order shuffled by Fisher-Yates from
// PhiloxStream(seed, kShuffleStream + epoch): a pure function of (seed, epoch), so a resumed
// run, or any rank, recomputes it without replay.
//
// Data parallelism: all ranks walk the same sequence of global batches of
// `batch_rows` windows; each rank fills only its own rows of every batch and
// advances by the whole batch, so the positions of all ranks stay equal.
//
// Evaluation: ReadSequential reads windows in stream order (no shuffle) and
// leaves the position alone. A fixed validation set of K batches of B rows is
// windows [0, K*B) of the validation stream: batch k is
// ReadSequential(k*B + row_begin, row_count, ...) on each rank.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ladder {

class DataLoader {
 public:
  // Where the next batch starts: window `index` of epoch `epoch`'s order.
  // Saving it and Restore()-ing it later continues exactly where it was.
  struct Position {
    uint64_t epoch = 0;
    uint64_t index = 0;
  };

  // `tokens` is not copied and must outlive the loader. InvalidArgument if it
  // holds fewer than context + 1 tokens.
  static absl::StatusOr<DataLoader> Create(absl::Span<const int32_t> tokens, int context,
                                           uint64_t seed);

  // Fills rows [row_begin, row_begin + row_count) of the next global batch of
  // batch_rows windows (inputs and targets are row_count x context, row-major)
  // and advances past the whole batch. A batch that runs past the end of an
  // epoch continues into the next epoch's order.
  void Next(int batch_rows, int row_begin, int row_count, int32_t* inputs, int32_t* targets);

  // Fills row_count rows with windows first_window, first_window + 1, ... in
  // stream order, wrapping around after the last window.
  void ReadSequential(uint64_t first_window, int row_count, int32_t* inputs,
                      int32_t* targets) const;

  Position position() const { return pos_; }
  // InvalidArgument if position.index is not a window of this stream (the
  // data or context changed since it was saved).
  absl::Status Restore(Position position);

  // Draws every epoch's order from `seed` from now on, keeping the
  // position: a loader whose random state was not restored.
  void Reseed(uint64_t seed);

  uint64_t num_windows() const { return windows_; }
  int context() const { return context_; }

 private:
  DataLoader(absl::Span<const int32_t> tokens, int context, uint64_t seed);
  // The window order of `epoch`; one epoch is cached.
  const std::vector<uint32_t>& Order(uint64_t epoch);
  void CopyWindow(uint64_t window, int32_t* inputs, int32_t* targets) const;

  absl::Span<const int32_t> tokens_;
  int context_;
  uint64_t seed_;
  uint64_t windows_;
  Position pos_;
  uint64_t order_epoch_;
  std::vector<uint32_t> order_;
};

}  // namespace ladder
