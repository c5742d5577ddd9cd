// How a model's weight matrices are stored for inference (--weights):
//   fp32          as trained
//   bf16          bfloat16 (src/core/bf16.h), rounded to nearest: 2 bytes per
//                 weight, multiplied in fp32 after an exact widening
//   int8          int8 in groups of 32 input channels, one f32 scale each
//                 (llama.cpp's Q8_0): 1.125 bytes per weight
//   int8-channel  int8 with one scale per output channel: 1 byte per weight
// The matrices are the four of each layer and the tied token embedding (the
// head); LayerNorms, biases and the position table stay fp32.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ladder {

enum class WeightFormat { kF32, kBF16, kInt8, kInt8Channel };

absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name);
const char* WeightFormatName(WeightFormat format);
bool IsInt8(WeightFormat format);
// Input channels per scale for a row of `cols` (0 for fp32 and bf16).
int64_t WeightGroup(WeightFormat format, int64_t cols);

}  // namespace ladder
