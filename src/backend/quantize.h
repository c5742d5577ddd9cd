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
#pragma once

#include <cmath>
#include <cstdint>

namespace ladder {

// Quantizes x[0..n) to q[0..n); returns the scale.
inline float QuantizeSymmetric(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = static_cast<int8_t>(std::lrintf(std::fmin(127.0f, std::fmax(-127.0f, x[i] * inv))));
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

}  // namespace ladder
