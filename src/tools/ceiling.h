// Ceilings measured in the running process, so throughput figures are ratios
// against what this machine, in this environment, can actually do.
#pragma once

namespace ladder {

// GFLOP/s of a square n x n x n cblas_sgemm on all threads (best of `reps`
// after one warm-up call). This is the "peak" MFU and benchmarks divide by.
double MeasureSgemmGflops(int n = 2048, int reps = 5);

}  // namespace ladder
