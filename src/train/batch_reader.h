// BatchReader: a rank's rows of each training batch, read on the training
// thread or one batch ahead on a loading thread (--prefetch).
//
// Loading a batch is host work that the device does not need to wait for:
// a real loader reads from storage, decodes and tokenizes. Read
// synchronously, every step first waits for it (the step's "data" time);
// read ahead, the next batch loads while the current step computes, and
// the step waits only for what loading takes beyond the compute. ladder's
// own loader copies windows out of memory and costs microseconds, so the
// difference shows only when loading is slow: the Env's LoadingBatch hook
// (src/train/env.h; `--inject-fault slow-data:MS`) makes it so.
//
// Prefetching changes when a batch is read, never which: the batches are
// the DataLoader's sequence (src/data/loader.h) either way, so losses are
// bitwise equal with and without it, and position() is the position after
// the last batch handed out (a checkpoint's), not the loader's own, which
// has run one batch ahead.
//
// Thread safety: one thread calls every method; the loading thread touches
// only the loader and the ahead buffers, and only while a load is in
// flight, which Next, Restore and the destructor wait for first.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "src/data/loader.h"
#include "src/train/env.h"

namespace ladder {

class BatchReader {
 public:
  // Reads rows [row_begin, row_begin + row_count) of each global batch of
  // batch_rows windows from `loader`. `env` is called before each batch is
  // read, on the thread that reads it; not owned, must outlive the reader.
  BatchReader(DataLoader loader, int batch_rows, int row_begin, int row_count, bool prefetch,
              Env* env);
  ~BatchReader();
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // Fills `inputs` and `targets` (row_count x context each) with the next
  // batch; with prefetch, waits for it and starts loading the one after.
  void Next(int32_t* inputs, int32_t* targets);

  // Where the next batch handed out starts.
  DataLoader::Position position() const { return next_; }
  // Continues at `p`, dropping a batch loaded ahead; the loader's error if
  // `p` is not a position of its stream (nothing changes then).
  absl::Status Restore(DataLoader::Position p);

  // The loader's Reseed, at position().
  void Reseed(uint64_t seed);

 private:
  // Reads the loader's next batch into `inputs` and `targets`.
  void Load(int32_t* inputs, int32_t* targets);
  // Waits for a load in flight, if any.
  void Wait();

  DataLoader loader_;
  int batch_rows_, row_begin_, row_count_;
  bool prefetch_;
  Env* env_;
  DataLoader::Position next_;
  std::vector<int32_t> ahead_inputs_, ahead_targets_;  // with prefetch
  std::future<void> ahead_;                            // the load in flight
};

}  // namespace ladder
