// Ceilings measured in the running process, so throughput figures are ratios
// against what this machine, in this environment, can actually do.
#pragma once

#include <cstdint>
#include <vector>

namespace ladder {

// GFLOP/s of a square n x n x n cblas_sgemm on all threads (best of `reps`
// after one warm-up call). This is the "peak" MFU and benchmarks divide by.
double MeasureSgemmGflops(int n = 2048, int reps = 5);

// Bytes per second all threads read from memory: a sum over `bytes` of
// floats. Batch-1 decoding reads every weight once per token, so this over
// the weight bytes is its speed limit; measure it over a buffer as large as
// the weights, so that a working set partly held by a large last-level
// cache (int8 weights of a small model) is compared with a read that gets
// the same help. The probe keeps its buffer, so a benchmark can read it
// between its own steps: on a shared machine the bandwidth others leave
// changes from second to second, and the best read taken throughout the
// run is the ceiling the run's work actually had.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(int64_t bytes);
  // Reads the buffer `reps` times (after one warm-up read on the first
  // call); returns the best bytes/s of every read so far.
  double Measure(int reps = 1);

 private:
  std::vector<float> buffer_;
  double best_ = 0.0;
};

}  // namespace ladder
