#include "src/data/loader.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "src/core/philox.h"

namespace ladder {
namespace {

// Uniform integer in [0, bound) without modulo bias (Lemire's method).
uint32_t UniformBelow(PhiloxStream& rng, uint32_t bound) {
  uint64_t m = static_cast<uint64_t>(rng.NextU32()) * bound;
  if (static_cast<uint32_t>(m) < bound) {
    const uint32_t threshold = (0u - bound) % bound;
    while (static_cast<uint32_t>(m) < threshold) {
      m = static_cast<uint64_t>(rng.NextU32()) * bound;
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

}  // namespace

absl::StatusOr<DataLoader> DataLoader::Create(absl::Span<const int32_t> tokens, int context,
                                              uint64_t seed) {
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("context length ", context, " must be >= 1"));
  }
  if (tokens.size() < static_cast<size_t>(context) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("only ", tokens.size(),
                                                   " tokens of data, but a context of ", context,
                                                   " needs at least ", context + 1));
  }
  if ((tokens.size() - 1) / context > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokens.size(), " tokens make more than 2^32 windows"));
  }
  return DataLoader(tokens, context, seed);
}

DataLoader::DataLoader(absl::Span<const int32_t> tokens, int context, uint64_t seed)
    : tokens_(tokens),
      context_(context),
      seed_(seed),
      windows_((tokens.size() - 1) / context),
      order_epoch_(std::numeric_limits<uint64_t>::max()) {}

const std::vector<uint32_t>& DataLoader::Order(uint64_t epoch) {
  if (epoch != order_epoch_) {
    order_.resize(windows_);
    std::iota(order_.begin(), order_.end(), 0u);
    PhiloxStream rng(seed_, kShuffleStream + epoch);
    for (uint64_t i = windows_ - 1; i > 0; --i) {
      std::swap(order_[i], order_[UniformBelow(rng, static_cast<uint32_t>(i + 1))]);
    }
    order_epoch_ = epoch;
  }
  return order_;
}

void DataLoader::CopyWindow(uint64_t window, int32_t* inputs, int32_t* targets) const {
  const int32_t* w = tokens_.data() + window * context_;
  std::copy(w, w + context_, inputs);
  std::copy(w + 1, w + 1 + context_, targets);
}

void DataLoader::Next(int batch_rows, int row_begin, int row_count, int32_t* inputs,
                      int32_t* targets) {
  assert(row_begin >= 0 && row_count >= 0 && row_begin + row_count <= batch_rows);
  for (int r = 0; r < row_count; ++r) {
    const uint64_t i = pos_.index + static_cast<uint64_t>(row_begin + r);
    const uint32_t window = Order(pos_.epoch + i / windows_)[i % windows_];
    CopyWindow(window, inputs + static_cast<size_t>(r) * context_,
               targets + static_cast<size_t>(r) * context_);
  }
  const uint64_t end = pos_.index + static_cast<uint64_t>(batch_rows);
  pos_ = {pos_.epoch + end / windows_, end % windows_};
}

void DataLoader::ReadSequential(uint64_t first_window, int row_count, int32_t* inputs,
                                int32_t* targets) const {
  for (int r = 0; r < row_count; ++r) {
    CopyWindow((first_window + r) % windows_, inputs + static_cast<size_t>(r) * context_,
               targets + static_cast<size_t>(r) * context_);
  }
}

void DataLoader::Reseed(uint64_t seed) {
  seed_ = seed;
  order_epoch_ = std::numeric_limits<uint64_t>::max();
}

absl::Status DataLoader::Restore(Position position) {
  if (position.index >= windows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("data position ", position.index, " is past the ", windows_,
                     " windows of this data (were the data or the context length changed?)"));
  }
  pos_ = position;
  return absl::OkStatus();
}

}  // namespace ladder
