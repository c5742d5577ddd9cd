// Ceilings measured in the running process, so throughput figures are ratios
// against what this machine, in this environment, can actually do.
#pragma once

#include <cstdint>

namespace ladder {

// GFLOP/s of a square n x n x n cblas_sgemm on all threads (best of `reps`
// after one warm-up call). This is the "peak" MFU and benchmarks divide by.
double MeasureSgemmGflops(int n = 2048, int reps = 5);

// Bytes per second all threads read from memory: a sum over `bytes` of
// floats, best of `reps` after one warm-up. Batch-1 decoding reads every
// weight once per token, so this over the weight bytes is its speed limit;
// measure it over a buffer as large as the weights, so that a working set
// partly held by a large last-level cache (int8 weights of a small model)
// is compared with a read that gets the same help.
double MeasureReadBandwidth(int64_t bytes = int64_t{1} << 30, int reps = 5);

}  // namespace ladder
