// GradientBuckets: the data-parallel sum of a gradient buffer, in buckets,
// each started as soon as the backward has finished every gradient in it.
//
// Data parallelism's one collective is the gradient sum at the end of the
// backward: the whole model's gradients, every step. Issued after the
// backward it is pure waiting, as long on every rank as the link makes it.
// But the backward finishes the gradients from the last layer to the first,
// and the parameter buffer lies in that order's reverse (wte, wpe, layer 0,
// ..., layer L-1, ln_f), so its tail is final long before its head. Cut the
// buffer into buckets from the end (PyTorch DDP's and Megatron's 25 MiB),
// start each bucket's all-reduce the moment the backward has passed it, and
// the reductions travel while the earlier layers' backward computes. Only
// what is still in flight when the backward ends is exposed.
//
// The buckets are the same, and reduced in the same order, with or without
// overlap, so the sums are bitwise identical either way: overlap changes
// when a bucket starts, never what it adds.
//
// Time split (one step): `overlapped` is the time before the backward ended
// during which some bucket was in flight (a bucket's completion is seen at
// the next Ready or at Finish, so this can include up to one layer's
// backward after the bucket's true end); `exposed` is the time Finish
// waited: the communication the step paid for in full.
//
// Thread: the caller's, one step at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "src/core/tensor.h"
#include "src/parallel/comm.h"

namespace ladder::dp {

class GradientBuckets {
 public:
  // Sums `grads` (a flat buffer) over `group` (not owned; two or more
  // ranks) in buckets of `bucket_floats` elements counted from its end (the
  // first bucket may be shorter). With `overlap` false, Ready does nothing
  // and Finish reduces every bucket in turn.
  GradientBuckets(Communicator* group, Tensor grads, int64_t bucket_floats, bool overlap);
  ~GradientBuckets();

  // Starts a step: the split from zero, every bucket unstarted. Anything a
  // failed step left in flight is waited for first (comm.h: a pending
  // operation is never abandoned).
  void BeginStep();
  // The backward has finished every gradient at [offset, numel): starts
  // (with overlap) each bucket lying wholly there, in order from the end,
  // and tests the ones in flight, which advances them. Errors are the
  // communicator's.
  absl::Status Ready(int64_t offset);
  // The backward is over: starts every bucket not yet started, waits for
  // all, and ends the step's split. After it the buffer holds the sums.
  absl::Status Finish();

  double overlapped_seconds() const { return overlapped_; }
  double exposed_seconds() const { return exposed_; }
  int buckets() const { return static_cast<int>(ranges_.size()); }

 private:
  struct Range {
    int64_t begin, end;
  };
  // Starts bucket next_ (ranges_ order: from the end of the buffer).
  absl::Status StartNext();
  // Tests the buckets in flight, oldest first, closing each complete one
  // until one is not (testing any advances them all).
  absl::Status Poll();
  // Adds [begin, end) to the union of in-flight time (intervals come in
  // order of their starts).
  void AddBusy(int64_t begin_ns, int64_t end_ns);

  Communicator* group_;
  Tensor grads_;
  bool overlap_;
  std::vector<Range> ranges_;  // from the end of the buffer to its start
  struct InFlight {
    std::unique_ptr<PendingOp> op;
    int64_t start_ns;
  };
  std::vector<InFlight> in_flight_;  // oldest first
  size_t next_ = 0;                  // the next bucket to start
  int64_t busy_until_ns_ = 0;        // the end of the union so far
  double overlapped_ = 0, exposed_ = 0;
};

}  // namespace ladder::dp
