// Ceilings measured in the running process, so throughput figures are ratios
// against what this machine, in this environment, can actually do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/core/timer.h"

namespace ladder {

// The best dense fp32 GEMM rate this process reaches on all its threads:
// the "peak" that MFU and `ladder bench` divide by. Candidates, each warmed
// up and timed as the best of `reps`:
//   - the BLAS library's sgemm on square sizes 512, 1024, ... up to max_n
//     (a kernel set's rate depends on the size);
//   - ladder's own fp32 kernel (MatmulForward for kSmallBatch tokens,
//     matmul_kernels.h) on a 2048 x 2048 weight.
// Where the BLAS library runs kernels older than the CPU (a misdetected
// core, blas_kernels.h), ladder's own kernel may be the faster of the two,
// and a ceiling from sgemm alone would let MFU pass 100%; with both, no
// step of training, which is built of these GEMMs and slower work around
// them, can beat it.
struct GemmCeiling {
  double gflops = 0;
  std::string source;  // what reached it, e.g. "OpenBLAS sgemm 2048^3"
};
GemmCeiling MeasureGemmCeiling(int max_n = 2048, int reps = 3);

// The ceiling for work done on `backend`'s device: the CPU's as above
// (max_n as there) for the CPU backend; for a device backend, the best
// MatmulForward of that backend (cuBLASLt on a GPU) on square operands of
// random values stored as `storage` (f32, or bf16: the tensor cores' rate a
// bf16 run's MFU must be measured against), each size warmed up and timed
// as the best of `reps` (every call followed by Synchronize): 2048, 4096 and
// 8192 on a GPU; 128 and 256 on the CUDA simulator, whose host reference
// GEMM is slow. MFU of a run on a GPU divides by this, never by the host's
// rate. Errors: the backend's (allocation, op).
absl::StatusOr<GemmCeiling> MeasureBackendGemmCeiling(Backend& backend, int max_n = 2048,
                                                      int reps = 3, DType storage = DType::kF32);

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
  // Reads the buffer once (after one warm-up read on the first call) and
  // returns that read's bytes/s: a benchmark that alternates its own work
  // with Sample() can compare each timing with the bandwidth of the same
  // moment, which on a shared machine is steadier than either alone.
  double Sample();

 private:
  double ReadSeconds();  // one read (after a warm-up read the first time)

  std::vector<float> buffer_;
  double best_ = 0.0;
  bool warm_ = false;
};

// A memory-bound piece of work timed against the bandwidth of the same
// moment: each of `reps` calls of work() (which returns a Status) sits
// between two probe reads, each about as long as the call, and its rate,
// `bytes` over its seconds, is divided by their mean (the bandwidth others
// left while it ran, interpolated). Medians over the calls:
struct PairedBandwidth {
  double seconds = 0;    // of one call
  double bandwidth = 0;  // bytes/s, the mean of the reads around a call
  double fraction = 0;   // of the rate over that bandwidth
};
template <typename F>
absl::Status TimeAgainstBandwidth(ReadBandwidthProbe& probe, int64_t bytes, int reps, F work,
                                  PairedBandwidth* out) {
  std::vector<double> seconds, bandwidth, fraction;
  double before = probe.Sample();
  for (int r = 0; r < reps; ++r) {
    Timer t;
    if (absl::Status s = work(); !s.ok()) return s;
    seconds.push_back(t.Seconds());
    const double after = probe.Sample();
    bandwidth.push_back((before + after) / 2);
    fraction.push_back(static_cast<double>(bytes) / seconds.back() / bandwidth.back());
    before = after;
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  *out = {median(seconds), median(bandwidth), median(fraction)};
  return absl::OkStatus();
}

}  // namespace ladder
