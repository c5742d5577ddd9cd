#include "src/model/weight_format.h"

#include "absl/strings/str_cat.h"

namespace ladder {

absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name) {
  if (name == "fp32") return WeightFormat::kF32;
  if (name == "bf16") return WeightFormat::kBF16;
  if (name == "int8") return WeightFormat::kInt8;
  if (name == "int8-channel") return WeightFormat::kInt8Channel;
  return absl::InvalidArgumentError(absl::StrCat("unknown weight format '", name,
                                                 "' (expected fp32, bf16, int8 or int8-channel)"));
}

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt8Channel:
      return "int8-channel";
    case WeightFormat::kF32:
      break;
  }
  return "fp32";
}

bool IsInt8(WeightFormat format) {
  return format == WeightFormat::kInt8 || format == WeightFormat::kInt8Channel;
}

int64_t WeightGroup(WeightFormat format, int64_t cols) {
  switch (format) {
    case WeightFormat::kInt8:
      return 32;
    case WeightFormat::kInt8Channel:
      return cols;
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
      break;
  }
  return 0;
}

}  // namespace ladder
