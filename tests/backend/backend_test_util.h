// What the op tests share to run on every backend: the backend list as a
// gtest parameter, a fixture that makes the backend (the `cuda` instances
// skip, with the reason in one line, where no GPU is usable), and typed
// device arrays that go through the backend's own Allocate / CopyFromHost /
// CopyToHost, so a test uploads host vectors, runs the op on the device and
// reads the result back to compare it with the references in
// reference_ops.h. Outputs start POISONED (NaN for floats, 0xff bytes for
// integers), so an element an op forgets to write shows up.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "src/backend/backend.h"
#include "src/backend/backend_factory.h"
#include "src/core/tensor.h"

namespace ladder::testing_backends {

// The backends every op test runs on, by their MakeBackend names.
inline auto AllBackends() { return ::testing::Values("cpu", "cuda-sim", "cuda"); }

// gtest instance names: cpu, cuda_sim, cuda.
inline std::string BackendName(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return DType::kI32;
  } else if constexpr (std::is_same_v<T, int8_t>) {
    return DType::kI8;
  } else {
    static_assert(std::is_same_v<T, uint16_t>, "f32, i32, i8 or bf16 bits");
    return DType::kBF16;
  }
}

// The poison an output starts with: NaN for floats, all-ones bytes otherwise.
template <typename T>
T Poison() {
  if constexpr (std::is_same_v<T, float>) {
    return std::numeric_limits<float>::quiet_NaN();
  } else {
    T v;
    std::memset(&v, 0xff, sizeof(v));
    return v;
  }
}

// numel elements of T in the backend's memory, viewed with `dims` by t().
// Every copy EXPECTs success; Get() returns the device's contents (waiting
// for every op enqueued before it).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Backend* backend, std::initializer_list<int64_t> dims)
      : backend_(backend), dims_(dims) {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    numel_ = n;
    absl::StatusOr<DeviceBuffer> buf = backend->Allocate(static_cast<size_t>(n) * sizeof(T));
    EXPECT_TRUE(buf.ok()) << buf.status();
    if (buf.ok()) buf_ = std::move(*buf);
  }

  int64_t numel() const { return numel_; }
  // The whole array with the dims it was made with.
  Tensor t() const {
    Tensor r(buf_.get(), DTypeOf<T>(), {}, backend_->device());
    r.rank = static_cast<int>(dims_.size());
    for (size_t i = 0; i < dims_.size(); ++i) r.shape[i] = dims_[i];
    return r;
  }
  // The first prod(dims) elements under other dims (a reshape or a prefix).
  Tensor t(std::initializer_list<int64_t> dims) const { return t().Slice(0, dims); }

  void Set(const std::vector<T>& host) {
    ASSERT_EQ(static_cast<int64_t>(host.size()), numel_);
    EXPECT_TRUE(backend_->CopyFromHost(t(), host.data()).ok());
  }
  void Poison() { Set(std::vector<T>(numel_, testing_backends::Poison<T>())); }
  std::vector<T> Get() const {
    std::vector<T> host(numel_);
    const absl::Status s = backend_->CopyToHost(host.data(), t());
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

 private:
  Backend* backend_ = nullptr;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  DeviceBuffer buf_;
};

// Per element |got - want| <= rtol |want| + atol max|want|; reports the
// worst element. NaN (an unwritten, poisoned element) always fails.
inline ::testing::AssertionResult AllClose(const std::vector<float>& got,
                                           const std::vector<double>& want, double rtol,
                                           double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  int64_t bad = 0;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double tol = rtol * std::fabs(want[i]) + atol * scale;
    if (!(err <= tol)) ++bad;
    if (!(err - tol <= worst_excess)) {
      worst_excess = err - tol;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance; worst at " << worst
         << ": got " << got[worst] << ", want " << want[worst] << " (max|want| " << scale << ")";
}
inline ::testing::AssertionResult AllClose(const std::vector<float>& got,
                                           const std::vector<float>& want, double rtol,
                                           double atol) {
  return AllClose(got, std::vector<double>(want.begin(), want.end()), rtol, atol);
}

// The same bits, element by element.
template <typename T>
::testing::AssertionResult BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << "differ at " << i << ": " << +a[i] << " vs " << +b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Owns a backend and makes arrays on it.
class BackendHarness {
 public:
  Backend& be() { return *backend_; }
  Backend* backend() { return backend_.get(); }
  bool is_cpu() const { return backend_->device() == Device::kCpu; }

  // A device copy of `host`, viewed with dims (their product must be its size).
  template <typename T>
  DeviceArray<T> Up(const std::vector<T>& host, std::initializer_list<int64_t> dims) {
    DeviceArray<T> a(backend_.get(), dims);
    a.Set(host);
    return a;
  }
  // An output: allocated and poisoned.
  template <typename T = float>
  DeviceArray<T> Out(std::initializer_list<int64_t> dims) {
    DeviceArray<T> a(backend_.get(), dims);
    a.Poison();
    return a;
  }

 protected:
  // Makes the backend `device`; the MakeBackend error if it cannot.
  absl::Status Make(const std::string& device) {
    absl::StatusOr<std::unique_ptr<Backend>> b = MakeBackend(device);
    if (!b.ok()) return b.status();
    backend_ = std::move(*b);
    return absl::OkStatus();
  }

  std::unique_ptr<Backend> backend_;
};

// The fixture of the op tests: TEST_P(..., ...) runs once per backend of
// AllBackends(). `cuda` skips when MakeBackend("cuda") fails (no GPU, or a
// build without CUDA); any other failure to make a backend fails the test.
class BackendTest : public ::testing::TestWithParam<const char*>, public BackendHarness {
 protected:
  void SetUp() override {
    const std::string device = GetParam();
    const absl::Status made = Make(device);
    if (!made.ok()) {
      if (device == "cuda") GTEST_SKIP() << "no CUDA device: " << made.message();
      FAIL() << "MakeBackend(\"" << device << "\"): " << made;
    }
  }
};

// For the checks of properties only the CPU backend has (thread-count
// independence, its ISA levels, bf16 weights, InvalidArgument for bad ids
// that live on the device): the same harness on the CPU backend alone.
class CpuBackendTest : public ::testing::Test, public BackendHarness {
 protected:
  void SetUp() override { ASSERT_TRUE(Make("cpu").ok()); }
};

}  // namespace ladder::testing_backends

// Instantiates a TEST_P suite over AllBackends() with readable names.
#define LADDER_INSTANTIATE_ON_ALL_BACKENDS(suite)                                         \
  INSTANTIATE_TEST_SUITE_P(AllBackends, suite, ::ladder::testing_backends::AllBackends(), \
                           ::ladder::testing_backends::BackendName)
