// Helpers shared by the CPU ops: shape checks for row-wise views, threading
// ranges, deterministic lane reductions and a vectorizable expf.
//
// Why lane reductions: without -ffast-math the compiler may not reorder a float
// sum, so `s += x[i]` runs one add at a time. Keeping kLanes independent partial
// sums (lane j takes elements j, j+kLanes, ...) gives the vectorizer a loop it
// may map onto SIMD registers as written, and fixes the summation order in the
// source, so the result never depends on alignment, vector width or threads.
#pragma once

#include <omp.h>

#include <bit>
#include <climits>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/backend/shape_check.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace ladder {
namespace cpu {

// Below this many elements an elementwise loop runs on the calling thread:
// waking the OpenMP team costs more than the work.
inline constexpr int64_t kParallelMin = 1 << 14;

// The shared shape checks (src/backend/shape_check.h), bound to the CPU.
inline absl::Status CheckCpu(absl::string_view op, absl::string_view what, const Tensor& t) {
  return CheckDevice(Device::kCpu, op, what, t);
}
inline absl::Status CheckExact(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, std::initializer_list<int64_t> dims) {
  return ladder::CheckExact(Device::kCpu, op, what, t, dtype, dims);
}
inline absl::Status RowView(absl::string_view op, absl::string_view what, const Tensor& t,
                            DType dtype, int64_t* rows, int64_t* cols) {
  return ladder::RowView(Device::kCpu, op, what, t, dtype, rows, cols);
}
inline absl::Status CheckRows(absl::string_view op, absl::string_view what, const Tensor& t,
                              DType dtype, int64_t rows, int64_t cols) {
  return ladder::CheckRows(Device::kCpu, op, what, t, dtype, rows, cols);
}
inline absl::Status CheckNumel(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, int64_t n) {
  return ladder::CheckNumel(Device::kCpu, op, what, t, dtype, n);
}

// The slice [begin, end) of [0, total) that thread `tid` of `nt` owns, with
// boundaries on multiples of `align` (so two threads never share a cache line
// of the output when align = 16 floats). Depends only on (total, tid, nt).
struct Range {
  int64_t begin, end;
};
inline Range ThreadRange(int64_t total, int64_t align, int tid, int nt) {
  int64_t blocks = (total + align - 1) / align;
  int64_t b0 = blocks * tid / nt, b1 = blocks * (tid + 1) / nt;
  int64_t begin = b0 * align, end = b1 * align;
  if (begin > total) begin = total;
  if (end > total) end = total;
  return {begin, end};
}

// Asks for the n floats at `row` now, so that the loads that follow find them
// in cache: for rows far apart (a head's rows of qkv, random rows of a table)
// the hardware prefetcher sees no stream, and a prefetch a few rows ahead
// keeps several misses in flight. The ForWrite form fetches the lines ready
// to be modified (rows that will be added into).
inline void PrefetchRow(const float* row, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(row + i);
}
inline void PrefetchRowForWrite(float* row, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(row + i, 1);
}

// ---- deterministic reductions ---------------------------------------------

inline constexpr int kLanes = 16;  // two AVX2 registers of floats

// The folds every lane reduction ends with: the lanes' sums pairwise (a fixed
// tree), their maxima in lane order. Max is exact, so only the sum's tree
// fixes bits.
inline float FoldSum(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}
inline float FoldMax(const float* acc) {
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

// sum_i f(i) for i in [0, n), in the fixed lane order described above.
template <typename F>
inline float LaneSum(int64_t n, F f) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  }
  for (int j = 0; i + j < n; ++j) acc[j] += f(i + j);
  return FoldSum(acc);
}

// Two sums in one pass (e.g. sum x and sum x*y of a LayerNorm row).
template <typename F, typename G>
inline void LaneSum2(int64_t n, F f, G g, float* sf, float* sg) {
  float a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      a[j] += f(i + j);
      b[j] += g(i + j);
    }
  }
  for (int j = 0; i + j < n; ++j) {
    a[j] += f(i + j);
    b[j] += g(i + j);
  }
  *sf = FoldSum(a);
  *sg = FoldSum(b);
}

// max_i x[i] (n >= 1). Written as compare-and-select so it vectorizes.
inline float LaneMax(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  for (int j = 0; i + j < n; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  return FoldMax(acc);
}

// LaneSum(n, f) and LaneMax(y, n) in one loop (n >= 1), each in its own lane
// order, so each result is bitwise theirs. Returns the sum and stores the
// max in *y_max. For a row's sum beside the next row's max: the next row
// streams in from memory while this one's arithmetic runs (CrossEntropyFused).
template <typename F>
inline float LaneSumAndMax(int64_t n, F f, const float* y, float* y_max) {
  float acc[kLanes] = {}, top[kLanes];
  for (int j = 0; j < kLanes; ++j) top[j] = y[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      acc[j] += f(i + j);
      top[j] = y[i + j] > top[j] ? y[i + j] : top[j];
    }
  }
  for (int j = 0; i + j < n; ++j) {
    acc[j] += f(i + j);
    top[j] = y[i + j] > top[j] ? y[i + j] : top[j];
  }
  *y_max = FoldMax(top);
  return FoldSum(acc);
}

// ---- vectorizable exp ------------------------------------------------------
// glibc's expf is a call the vectorizer cannot inline. This is Cephes' expf
// (Cody-Waite reduction x = n ln2 + r, degree-6 polynomial for e^r, 2^n built
// in the exponent bits), max relative error ~1e-7. Every step is branch-free
// arithmetic or bit logic, so a loop calling it vectorizes (a float ternary
// here would leave a branch the vectorizer refuses, hence the bit masks).
// Returns 0 below -87.3 (where e^x leaves the normal range), +inf above 88.37
// (where 2^n would; true overflow is at 88.72), NaN for NaN.
// e^xc for xc already clamped to the normal range, on a float or a GCC float
// vector F (I: the int type of the same width): the reduction and polynomial
// shared by ExpF below and the attention kernel's 8-lane exp.
template <typename F, typename I>
inline F ExpInRange(F xc) {
  // n = round(x / ln2) via the 1.5 * 2^23 trick: the integer lands in the low
  // mantissa bits of t.
  const F t = xc * 1.44269504088896341f + 12582912.0f;
  const F n = t - 12582912.0f;
  F r = xc - n * 0.693359375f;  // ln2 split in two for an exact reduction
  r = r - n * -2.12194440e-4f;
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I pow2 = (std::bit_cast<I>(t) - 0x4B400000 + 127) << 23;  // 2^n
  return p * std::bit_cast<F>(pow2);
}

inline float ExpF(float x) {
  const int32_t under = -static_cast<int32_t>(x < -87.3f);
  const int32_t over = -static_cast<int32_t>(x > 88.37f);
  // Out-of-range lanes compute e^0 and are replaced at the end.
  const float xc = std::bit_cast<float>(std::bit_cast<int32_t>(x) & ~(under | over));
  int32_t yb = std::bit_cast<int32_t>(ExpInRange<float, int32_t>(xc));
  yb &= ~under;                                                           // -> 0
  yb = (yb & ~over) | (std::bit_cast<int32_t>(__builtin_inff()) & over);  // -> inf
  return std::bit_cast<float>(yb);
}

// A per-thread scratch buffer that only grows, so hot paths do not allocate
// after the first call of a given size.
inline float* ScratchFloats(size_t n) {
  static thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}
inline double* ScratchDoubles(size_t n) {
  static thread_local std::vector<double> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace cpu
}  // namespace ladder
