#include "src/tools/ceiling.h"

#include <cblas.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/core/timer.h"

namespace ladder {

GemmCeiling MeasureGemmCeiling(int max_n, int reps) {
  GemmCeiling best;
  for (int n = 512; n <= max_n; n *= 2) {
    std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
    auto run = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                  0.0f, c.data(), n);
    };
    const double gflops = 2.0 * n * n * static_cast<double>(n) / BestSeconds(run, reps) / 1e9;
    if (gflops > best.gflops) best = {gflops, absl::StrCat("BLAS sgemm ", n, "^3")};
  }
  // ladder's own kernel: kSmallBatch tokens through a 2048 x 2048 weight.
  constexpr int64_t kC = 2048, kN = cpu::kSmallBatch;
  std::vector<float> w(kC * kC, 0.25f), x(kN * kC, 0.5f), y(kN * kC);
  auto own = [&] { cpu::SmallMatmul(x.data(), kN, kC, w.data(), kC, nullptr, y.data()); };
  const double gflops = 2.0 * kN * kC * static_cast<double>(kC) / BestSeconds(own, reps) / 1e9;
  if (gflops > best.gflops) {
    best = {gflops, absl::StrCat("ladder's fp32 kernel (", CpuIsaName(ActiveCpuIsa()), ") ", kN,
                                 "x", kC, "x", kC)};
  }
  return best;
}

absl::StatusOr<GemmCeiling> MeasureBackendGemmCeiling(Backend& backend, int max_n, int reps,
                                                      DType storage) {
  if (backend.device() == Device::kCpu) return MeasureGemmCeiling(max_n, reps);
  const std::vector<int64_t> sizes = backend.memory_is_host()
                                         ? std::vector<int64_t>{128, 256}
                                         : std::vector<int64_t>{2048, 4096, 8192};
  GemmCeiling best;
  PhiloxStream rng(0, kSyntheticDataStream);
  for (const int64_t n : sizes) {
    const size_t bytes = DTypeSize(storage);
    ASSIGN_OR_RETURN(DeviceBuffer memory, backend.Allocate(3 * n * n * bytes));
    char* base = static_cast<char*>(memory.get());
    const Tensor a(base, storage, {n, n}, backend.device());
    const Tensor w(base + n * n * bytes, storage, {n, n}, backend.device());
    const Tensor out(base + 2 * n * n * bytes, storage, {n, n}, backend.device());
    std::vector<float> host(2 * n * n);
    for (float& x : host) x = rng.NextUniform() - 0.5f;
    const Tensor operands(base, storage, {2 * n * n}, backend.device());
    if (storage == DType::kBF16) {
      std::vector<bf16> rounded(host.size());
      for (size_t i = 0; i < host.size(); ++i) rounded[i] = FloatToBf16(host[i]);
      RETURN_IF_ERROR(backend.CopyFromHost(operands, rounded.data()));
    } else {
      RETURN_IF_ERROR(backend.CopyFromHost(operands, host.data()));
    }
    absl::Status failed;
    auto run = [&] {
      absl::Status s = backend.MatmulForward(out, a, w, Tensor());
      if (s.ok()) s = backend.Synchronize();
      if (!s.ok() && failed.ok()) failed = s;
    };
    const double seconds = BestSeconds(run, reps);
    RETURN_IF_ERROR(failed);
    const double gflops = 2.0 * n * n * static_cast<double>(n) / seconds / 1e9;
    if (gflops > best.gflops) {
      best = {gflops, absl::StrCat(std::string(backend.name()), " MatmulForward ",
                                   DTypeName(storage), " ", n, "^3")};
    }
  }
  return best;
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

double ReadBandwidthProbe::ReadSeconds() {
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
  const bool first = !warm_;
  warm_ = true;
  return BestSeconds(run, 1, /*warm_up=*/first);
}

double ReadBandwidthProbe::Measure(int reps) {
  for (int r = 0; r < reps; ++r) Sample();
  return best_;
}

double ReadBandwidthProbe::Sample() {
  const double rate = static_cast<double>(buffer_.size()) * sizeof(float) / ReadSeconds();
  best_ = std::max(best_, rate);
  return rate;
}

}  // namespace ladder
