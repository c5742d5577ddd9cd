// Per-step training metrics: one JSON object per line in DIR/metrics.jsonl,
// and the progress line on stderr derived from the same record.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/train/offload.h"

namespace ladder {

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer updates done
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // achieved FLOP rate / the GEMM ceiling (tools/ceiling.h), at most 1
  // Time split of the step, seconds, consecutive intervals of one chain of
  // clock readings: data (clearing the gradients and reading the batch),
  // the microbatches' forward and backward passes, the bubble, then the
  // optimizer (gradient reductions, norm, update). They add up to t_step.
  double t_data = 0, t_forward = 0, t_backward = 0, t_optimizer = 0;
  double t_step = 0;
  // Of the microbatch schedule's wall time (through receiving the last
  // stage's loss), what was not forward or backward: the pipeline bubble
  // (waiting for the neighbouring stages), seconds; 0 with one stage.
  double t_bubble = 0;
  // The data-parallel gradient sum (src/parallel/data_parallel/
  // gradient_buckets.h): seconds a bucket was in flight while the backward
  // still ran (overlapped: hidden behind compute, inside t_backward), and
  // seconds the step waited for buckets after it (exposed: inside
  // t_optimizer). 0 without a data group, with ZeRO-1 or local SGD.
  double t_grad_overlapped = 0, t_grad_exposed = 0;
  // Writing a checkpoint after the step, on disk or in memory (the training
  // stall it caused): the snapshot and the shard writes. The commit
  // (agreeing that every rank wrote, the manifest, the rename) follows the
  // step's metrics line and is not counted.
  double t_checkpoint = 0;
  // Communication of this rank during the step, per parallel axis (seconds
  // inside calls and payload bytes, src/parallel/comm.h); empty for a group of one.
  struct AxisComm {
    std::string axis;
    double seconds = 0;
    int64_t bytes = 0;
  };
  std::vector<AxisComm> comm;
  // Device memory of this rank by category, bytes (what `ladder plan`
  // predicts per stage): weights (fp32 masters unless offloaded, plus the
  // copy the ops read if any), gradients (with the ZeRO-1 shard), optimizer
  // state (0 when offloaded), activation arena; and the host memory the
  // optimizer offload holds (masters, moments, staging).
  struct Memory {
    int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, host = 0;
  };
  Memory memory;
  // Optimizer offload: the host-device link this step (src/train/offload.h).
  LinkTraffic link;
  // Every rank's compute seconds this step, in rank order (multi-rank runs;
  // src/train/straggler.h says what counts).
  std::vector<double> rank_seconds;
  // The rank the others waited for, when one is named (src/train/straggler.h).
  struct Straggler {
    int rank = 0;
    double ratio = 0;       // its compute time / the median rank's
    double wait_share = 0;  // the share of the step the others spent waiting for it
    // "rank 5: 2.3x median, waiting cost 41% of the step"
    std::string Describe() const;
  };
  std::optional<Straggler> straggler;
  bool skipped = false;  // the guard refused the update (src/train/guard.h)
  std::optional<double> val_loss;

  std::string ToJson() const;
  // "step 100/2000 | loss 2.1234 | lr 1.00e-03 | 12.3k tok/s | MFU 23.1% | ETA 1m23s",
  // with " | straggler rank 5: ..." before the ETA when one is named.
  std::string ProgressLine(int64_t total_steps, double eta_seconds) const;
};

// Appends records to a JSONL file, flushing each line so a crash keeps them.
class MetricsWriter {
 public:
  // Creates the file, or for a resumed run (keep_through >= 0) keeps the
  // records of steps up to keep_through and appends after them.
  static absl::StatusOr<MetricsWriter> Open(const std::string& path, int64_t keep_through = -1);
  MetricsWriter(MetricsWriter&& other) noexcept : file_(other.file_) { other.file_ = nullptr; }
  MetricsWriter(const MetricsWriter&) = delete;
  ~MetricsWriter();
  absl::Status Write(const StepRecord& r);

 private:
  explicit MetricsWriter(std::FILE* f) : file_(f) {}
  std::FILE* file_;
};

}  // namespace ladder
