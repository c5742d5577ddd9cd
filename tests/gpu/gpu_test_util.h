// Helpers shared by the GPU kernel tests (tests/gpu/*_test.cc): device
// buffers, Philox inputs, NaN poisoning and the comparisons. Header-only; the
// same text serves the build for a real GPU and the simulator's build (where
// the CUDA runtime calls below are the simulator's).
#pragma once

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "src/core/tensor.h"

namespace ladder {
namespace gpu_test {

// Seed 20240607, or LADDER_GPU_TEST_SEED, so a failure reproduces.
inline uint64_t Seed() {
  const char* s = std::getenv("LADDER_GPU_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20240607u;
}

#define ASSERT_CUDA_OK(expr)                                                   \
  do {                                                                         \
    const cudaError_t _err = (expr);                                           \
    ASSERT_EQ(_err, cudaSuccess) << #expr << ": " << cudaGetErrorString(_err); \
  } while (0)

// True (with the reason) when no CUDA device can run kernels.
inline bool NoGpu(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    *why = cudaGetErrorString(err);
    return true;
  }
  if (n == 0) *why = "no CUDA device";
  return n == 0;
}

// Fixture base: skips the test, with the reason, when there is no device.
class GpuTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, int8_t>) {
    return DType::kI8;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return DType::kBF16;
  } else {
    static_assert(std::is_same_v<T, int32_t>);
    return DType::kI32;
  }
}

// A GPU allocation of n elements of T, `offset` elements into the
// allocation (offset 1 defeats 16-byte alignment and forces scalar paths).
template <typename T>
class GpuBuffer {
 public:
  explicit GpuBuffer(int64_t n, int64_t offset = 0) : n_(n), offset_(offset) {
    const size_t bytes = sizeof(T) * static_cast<size_t>(n + offset);
    if (bytes > 0 && cudaMalloc(&base_, bytes) != cudaSuccess) base_ = nullptr;
  }
  explicit GpuBuffer(const std::vector<T>& host, int64_t offset = 0)
      : GpuBuffer(static_cast<int64_t>(host.size()), offset) {
    Upload(host);
  }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  ~GpuBuffer() {
    if (base_ != nullptr) cudaFree(base_);
  }

  bool ok() const { return base_ != nullptr || n_ + offset_ == 0; }
  T* data() const { return base_ == nullptr ? nullptr : base_ + offset_; }
  int64_t size() const { return n_; }
  Tensor View(std::initializer_list<int64_t> dims) const {
    return Tensor(data(), DTypeOf<T>(), dims, Device::kCuda);
  }
  void Upload(const std::vector<T>& host) const {
    EXPECT_EQ(static_cast<int64_t>(host.size()), n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(data(), host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  std::vector<T> Download() const {
    std::vector<T> host(static_cast<size_t>(n_));
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), data(), sizeof(T) * host.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  T* base_ = nullptr;
  int64_t n_, offset_;
};
using GpuFloats = GpuBuffer<float>;
using GpuInts = GpuBuffer<int32_t>;

// ---- bf16 storage (backend.h "Precision") ----------------------------------------

// The relative error of one rounding to bf16 (to nearest): half of the
// 2^-7 spacing of bf16 values in [1, 2), i.e. |bf16(x) - x| <= 2^-8 |x|.
inline constexpr double kBf16Rounding = 1.0 / 256;

// x rounded to bf16 and widened back: inputs that both the bf16 kernels and
// the fp32 reference see exactly.
inline std::vector<float> Bf16Rounded(std::vector<float> x) {
  for (float& v : x) v = Bf16ToFloat(FloatToBf16(v));
  return x;
}

// Activations stored in either dtype on the device, read and written as
// floats on the host: one test body covers f32 and bf16. Upload rounds to
// bf16 (nearest even) when the dtype is bf16; Download widens exactly.
class GpuStored {
 public:
  GpuStored(const std::vector<float>& host, DType dtype, int64_t offset = 0)
      : dtype_(dtype), f32_(dtype == DType::kF32 ? static_cast<int64_t>(host.size()) : 0, offset),
        b16_(dtype == DType::kBF16 ? static_cast<int64_t>(host.size()) : 0, offset),
        n_(static_cast<int64_t>(host.size())) {
    Upload(host);
  }
  bool ok() const { return f32_.ok() && b16_.ok(); }
  DType dtype() const { return dtype_; }
  void* data() const {
    return dtype_ == DType::kF32 ? static_cast<void*>(f32_.data()) : b16_.data();
  }
  Tensor View(std::initializer_list<int64_t> dims) const {
    return Tensor(data(), dtype_, dims, Device::kCuda);
  }
  void Upload(const std::vector<float>& host) const {
    if (dtype_ == DType::kF32) return f32_.Upload(host);
    std::vector<bf16> b(host.size());
    for (size_t i = 0; i < host.size(); ++i) b[i] = FloatToBf16(host[i]);
    b16_.Upload(b);
  }
  std::vector<float> Download() const {
    if (dtype_ == DType::kF32) return f32_.Download();
    const std::vector<bf16> b = b16_.Download();
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); ++i) f[i] = Bf16ToFloat(b[i]);
    return f;
  }
  int64_t size() const { return n_; }

 private:
  DType dtype_;
  GpuBuffer<float> f32_;
  GpuBuffer<bf16> b16_;
  int64_t n_;
};

// n values of N(mean, stddev) from Philox stream `stream`.
inline std::vector<float> Normal(int64_t n, uint64_t stream, float mean = 0.0f,
                                 float stddev = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  FillNormal(v.data(), 0, n, Seed(), stream, mean, stddev);
  return v;
}

// n integers uniform in [lo, hi) from Philox stream `stream`.
inline std::vector<int32_t> UniformInts(int64_t n, uint64_t stream, int64_t lo, int64_t hi) {
  PhiloxStream rng(Seed(), stream);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) {
    x = static_cast<int32_t>(lo + static_cast<int64_t>(rng.NextU32() % static_cast<uint64_t>(hi - lo)));
  }
  return v;
}

// What outputs hold before a kernel writes them: any element it skips stays
// NaN and fails every comparison.
inline std::vector<float> Poison(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

// Expects |got - want| <= abs_tol + rel_tol * |want| everywhere (NaN fails),
// reporting the count and the worst element.
inline void ExpectClose(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& want, double rel_tol, double abs_tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = abs_tol + rel_tol * std::fabs(static_cast<double>(want[i]));
    if (!(err <= bound)) ++bad;
    const double excess = std::isnan(err) ? 1e300 : err / bound;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside tolerance (rel " << rel_tol << ", abs " << abs_tol
                     << "); worst at " << worst << ": gpu " << got[worst] << " cpu "
                     << want[worst];
}

// Expects |got[i] - want[i]| <= bound[i] everywhere (NaN fails), for
// tolerances that vary per element; reports the count and the worst element.
inline void ExpectWithin(const std::string& what, const std::vector<float>& got,
                         const std::vector<float>& want, const std::vector<double>& bound) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(bound.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= bound[i])) ++bad;
    const double excess = std::isnan(err) ? 1e300 : err / bound[i];
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside tolerance; worst at " << worst << ": gpu "
                     << got[worst] << " cpu " << want[worst] << " bound " << bound[worst];
}

// Expects the same bits everywhere, reporting the count and the first difference.
inline void ExpectBitwise(const std::string& what, const std::vector<float>& got,
                          const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements differ in their bits; first at " << first << ": "
                     << got[first] << " vs " << want[first];
}

// Distance in units in the last place between two finite floats (0 when
// equal, 1 for neighbours; +0 and -0 are 0 apart).
inline int64_t UlpDistance(float a, float b) {
  auto key = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Expects every element within max_ulps of the reference (NaN fails).
inline void ExpectUlps(const std::string& what, const std::vector<float>& got,
                       const std::vector<float>& want, int64_t max_ulps) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  int64_t worst_ulps = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t u = std::isnan(got[i]) || std::isnan(want[i])
                          ? std::numeric_limits<int64_t>::max()
                          : UlpDistance(got[i], want[i]);
    if (u > max_ulps) ++bad;
    if (u > worst_ulps) worst_ulps = u, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements more than "
                     << max_ulps << " ulp away; worst at " << worst << ": gpu " << got[worst]
                     << " cpu " << want[worst];
}

}  // namespace gpu_test
}  // namespace ladder
