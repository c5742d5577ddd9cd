#include "src/tools/ceiling.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "src/core/timer.h"

namespace ladder {
namespace {

// Seconds of the fastest of `reps` runs, after one warm-up run unless the
// caller has warmed up already.
template <typename F>
double BestSeconds(F run, int reps, bool warm_up = true) {
  if (warm_up) run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    run();
    best = std::min(best, t.Seconds());
  }
  return best;
}

}  // namespace

double MeasureSgemmGflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  return 2.0 * n * n * static_cast<double>(n) / BestSeconds(run, reps) / 1e9;
}

// 64 independent partial sums: a single running sum would wait on each
// add's latency and measure the adder, not the memory.
constexpr int64_t kLanes = 64;

ReadBandwidthProbe::ReadBandwidthProbe(int64_t bytes)
    : buffer_(static_cast<size_t>(std::max<int64_t>(kLanes, bytes / 4 / kLanes * kLanes))) {
  // Each thread touches its own slice first, so its pages sit near it.
  const int64_t n = static_cast<int64_t>(buffer_.size());
  float* a = buffer_.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kLanes) std::fill_n(a + i, kLanes, 1.0f);
}

double ReadBandwidthProbe::Measure(int reps) {
  const int64_t n = static_cast<int64_t>(buffer_.size());
  const float* a = buffer_.data();
  volatile float sink = 0;
  auto run = [&] {
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      float lanes[kLanes] = {};
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; i += kLanes) {
#pragma omp simd
        for (int64_t j = 0; j < kLanes; ++j) lanes[j] += a[i + j];
      }
      for (float x : lanes) total += x;
    }
    sink = sink + total;
  };
  const double seconds = BestSeconds(run, reps, /*warm_up=*/best_ == 0.0);
  best_ = std::max(best_, static_cast<double>(n) * sizeof(float) / seconds);
  return best_;
}

}  // namespace ladder
