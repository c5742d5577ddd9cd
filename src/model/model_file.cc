#include "src/model/model_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/crc32.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

constexpr char kMagic[8] = {'L', 'A', 'D', 'D', 'E', 'R', 'M', '\0'};
constexpr uint32_t kVersion = 1;

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

int64_t ExpectedFloats(const GptConfig& cfg) {
  return ParameterTable(GptParameterSpecs(cfg)).total_floats();
}

}  // namespace

absl::Status SaveModelFile(const std::string& path, const GptConfig& cfg,
                           const std::vector<float>& weights) {
  if (static_cast<int64_t>(weights.size()) != ExpectedFloats(cfg)) {
    return absl::InvalidArgumentError("weights do not match the model config");
  }
  const std::string config_text = cfg.ToText();
  std::string out;
  out.reserve(32 + config_text.size() + weights.size() * sizeof(float));
  out.append(kMagic, sizeof(kMagic));
  Append(&out, kVersion);
  Append(&out, static_cast<uint32_t>(config_text.size()));
  out += config_text;
  Append(&out, static_cast<uint64_t>(weights.size()));
  out.append(reinterpret_cast<const char*>(weights.data()), weights.size() * sizeof(float));
  Append(&out, Crc32(0, out.data(), out.size()));
  return WriteFileAtomically(path, out);
}

absl::StatusOr<ModelFile> LoadModelFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("model file '", path, "' is invalid: ", why));
  };
  if (data.size() < 16 + 8 + 4 || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a ladder model file (bad magic or too short)");
  }
  uint32_t version, config_len;
  std::memcpy(&version, data.data() + 8, 4);
  std::memcpy(&config_len, data.data() + 12, 4);
  if (version != kVersion) return corrupt(absl::StrCat("unsupported version ", version));
  if (config_len > data.size() - 16 - 8 - 4) return corrupt("config length exceeds the file");
  uint64_t count;
  std::memcpy(&count, data.data() + 16 + config_len, 8);
  const uint64_t payload = data.size() - 16 - config_len - 8 - 4;
  if (count > payload / sizeof(float) || count * sizeof(float) != payload) {
    return corrupt(absl::StrCat("file size does not match its ", count, " weights (truncated?)"));
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, data.data() + data.size() - 4, 4);
  if (Crc32(0, data.data(), data.size() - 4) != stored_crc) return corrupt("checksum mismatch");

  ModelFile mf;
  ASSIGN_OR_RETURN(KeyValueConfig kv, KeyValueConfig::ParseText(data.substr(16, config_len), path));
  RETURN_IF_ERROR(mf.config.ReadFrom(kv));
  RETURN_IF_ERROR(kv.CheckAllRead());
  if (static_cast<int64_t>(count) != ExpectedFloats(mf.config)) {
    return corrupt(
        absl::StrCat("holds ", count, " weights but its config needs ", ExpectedFloats(mf.config)));
  }
  mf.weights.resize(count);
  std::memcpy(mf.weights.data(), data.data() + 16 + config_len + 8, count * sizeof(float));
  return mf;
}

}  // namespace ladder
