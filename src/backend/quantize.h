// Symmetric int8 quantization: the one definition of the int8 formats that
// the backends' kernels read (backend.h: int8 weights, int8 KV cache) and the
// model writes. Host code, no device: weights are quantized once at load.
//
// A group of n values x is stored as n int8 q and one f32 scale:
//   scale = max|x| / 127,  q = round(x / scale) in [-127, 127],  x ~= q * scale.
// An all-zero group gets scale 0 and q = 0. The error per value is at most
// scale / 2, so it shrinks with the group's largest magnitude: small groups
// (32 values, as llama.cpp's Q8_0) keep an outlier from costing its
// neighbours their precision.
//
// Weight matrices are stored in panels (PackInt8Panels below), the layout
// the matmul kernels read; QuantizeRows makes the plain row-major form that
// packing, and tests' references, start from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ladder {

// Quantizes x[0..n) to q[0..n); returns the scale. Activations are quantized
// on every matmul call, so both loops are written to vectorize: no libm calls
// (std::fmax, lrintf), and the max as an OpenMP simd reduction (the compiler
// will not reorder a float max by itself; a max is exact in any order).
// Rounding is to nearest, ties to even, by adding and subtracting 1.5 * 2^23
// (exact for |v| <= 127 in the default rounding mode); the clamp between the
// multiply and the add keeps the compiler from fusing them.
inline float QuantizeSymmetric(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
#pragma omp simd reduction(max : amax)
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * inv;
    v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
    q[i] = static_cast<int8_t>(static_cast<int32_t>((v + kRound) - kRound));
  }
  return scale;
}

// A [rows, cols] row-major matrix in groups of `group` columns (group divides
// cols): q [rows, cols], scales [rows, cols / group].
inline void QuantizeRows(const float* w, int64_t rows, int64_t cols, int64_t group, int8_t* q,
                         float* scales) {
  const int64_t groups = cols / group;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = r * cols + g * group;
      scales[r * groups + g] = QuantizeSymmetric(w + at, group, q + at);
    }
  }
}

// ---- panel layout of an int8 weight matrix ---------------------------------
// A [rows, cols] matrix (rows a multiple of kInt8PanelRows) is stored as
// rows / 16 panels of 16 rows. Within a panel the values go 4 input channels
// at a time: 16 rows x 4 channels = 64 bytes, one AVX-512 register, for
// channels 0-3, then 16 rows x channels 4-7, and so on. An int8 dot-product
// instruction (VPDPBUSD) multiplies such a register by one token's 4
// activations broadcast to every lane and adds each lane's 4 products into
// that row's sum, so a register of 16 output channels is computed without
// any horizontal reduction, and the weights stream in memory order. The
// scales of a panel go group by group, 16 rows each, so a group's scales
// are one register too.
constexpr int64_t kInt8PanelRows = 16;

// Where value (r, c) of a [rows, cols] matrix lives in the panel layout.
inline int64_t Int8PanelIndex(int64_t r, int64_t c, int64_t cols) {
  return (r / kInt8PanelRows) * kInt8PanelRows * cols + (c / 4) * (kInt8PanelRows * 4) +
         (r % kInt8PanelRows) * 4 + c % 4;
}
// Where scale (r, g) of a matrix with `groups` groups per row lives.
inline int64_t Int8PanelScaleIndex(int64_t r, int64_t g, int64_t groups) {
  return (r / kInt8PanelRows) * kInt8PanelRows * groups + g * kInt8PanelRows + r % kInt8PanelRows;
}

// Row-major q [rows, cols] and scales [rows, cols / group] (QuantizeRows) to
// the panel layout; rows must be a multiple of kInt8PanelRows, cols of 4.
inline void PackInt8Panels(const int8_t* q, const float* scales, int64_t rows, int64_t cols,
                           int64_t group, int8_t* q_panels, float* scale_panels) {
  const int64_t groups = cols / group;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) q_panels[Int8PanelIndex(r, c, cols)] = q[r * cols + c];
    for (int64_t g = 0; g < groups; ++g) {
      scale_panels[Int8PanelScaleIndex(r, g, groups)] = scales[r * groups + g];
    }
  }
}

}  // namespace ladder
