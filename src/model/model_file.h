// The single-file model format written at the end of `ladder train` and read
// by `generate` and `eval`: the model config and all fp32 weights, with a
// checksum. (Sharded training checkpoints are a separate format.)
//
//   offset 0   8 bytes  magic "LADDERM\0"
//          8   u32      format version (1)
//         12   u32      config text length L
//         16   L bytes  config text (GptConfig::ToText)
//     16 + L   u64      number of floats P (must equal the config's table)
//     24 + L   P * f32  weights, in ParameterTable order, little-endian
//   end - 4    u32      CRC-32 of everything before it
//
// The file is written to <path>.tmp and renamed, so a crash never leaves a
// half-written model under the real name.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/gpt_config.h"

namespace ladder {

struct ModelFile {
  GptConfig config;
  std::vector<float> weights;
};

absl::Status SaveModelFile(const std::string& path, const GptConfig& cfg,
                           const std::vector<float>& weights);
// Validates magic, version, sizes and checksum before returning anything.
absl::StatusOr<ModelFile> LoadModelFile(const std::string& path);

}  // namespace ladder
