#include "src/train/batch_reader.h"

#include <algorithm>
#include <utility>

#include "src/core/status.h"
#include "src/core/trace.h"

namespace ladder {

BatchReader::BatchReader(DataLoader loader, int batch_rows, int row_begin, int row_count,
                         bool prefetch, Env* env)
    : loader_(std::move(loader)),
      batch_rows_(batch_rows),
      row_begin_(row_begin),
      row_count_(row_count),
      prefetch_(prefetch),
      env_(env),
      next_(loader_.position()) {
  if (prefetch_) {
    const size_t n = static_cast<size_t>(row_count) * loader_.context();
    ahead_inputs_.resize(n);
    ahead_targets_.resize(n);
  }
}

BatchReader::~BatchReader() { Wait(); }

void BatchReader::Load(int32_t* inputs, int32_t* targets) {
  env_->LoadingBatch();
  loader_.Next(batch_rows_, row_begin_, row_count_, inputs, targets);
}

void BatchReader::Wait() {
  if (ahead_.valid()) ahead_.get();
}

void BatchReader::Next(int32_t* inputs, int32_t* targets) {
  if (!prefetch_) {
    Load(inputs, targets);
    next_ = loader_.position();
    return;
  }
  if (!ahead_.valid()) {  // the first batch, or the first after a Restore
    Load(ahead_inputs_.data(), ahead_targets_.data());
  } else {
    TraceSpan span(TraceTrack::kCompute, "data", "wait for the prefetched batch");
    Wait();
  }
  std::copy(ahead_inputs_.begin(), ahead_inputs_.end(), inputs);
  std::copy(ahead_targets_.begin(), ahead_targets_.end(), targets);
  next_ = loader_.position();
  ahead_ =
      std::async(std::launch::async, [this] { Load(ahead_inputs_.data(), ahead_targets_.data()); });
}

void BatchReader::Reseed(uint64_t seed) {
  Wait();
  loader_.Reseed(seed);
  (void)loader_.Restore(next_);  // a position it has handed out
}

absl::Status BatchReader::Restore(DataLoader::Position p) {
  Wait();  // a load ahead has moved the loader on by a batch
  if (absl::Status s = loader_.Restore(p); !s.ok()) {
    (void)loader_.Restore(next_);  // back where the next batch starts
    return s;
  }
  next_ = p;
  return absl::OkStatus();
}

}  // namespace ladder
