#include "src/model/gpt_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/status.h"

namespace ladder {

absl::Status GptConfig::Validate() const {
  auto positive = [](const char* key, int v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("model: ", key, " must be positive, got ", v));
  };
  RETURN_IF_ERROR(positive("n_layer", n_layer));
  RETURN_IF_ERROR(positive("n_head", n_head));
  RETURN_IF_ERROR(positive("n_embd", n_embd));
  RETURN_IF_ERROR(positive("context", context));
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  if (n_embd % n_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: n_embd (", n_embd, ") must be divisible by n_head (", n_head, ")"));
  }
  if (vocab_size < 256 || vocab_size > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: vocab_size must be in [256 (the byte alphabet), ", kMaxVocab,
                     "], got ", vocab_size));
  }
  if (n_layer > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: n_layer must be at most ", kMaxLayers, ", got ", n_layer));
  }
  if (n_embd > kMaxEmbd) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: n_embd must be at most ", kMaxEmbd, ", got ", n_embd));
  }
  const double params = static_cast<double>(NumParameters());  // in range: bounds above
  if (params > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model: n_layer %d, n_embd %d, context %d and vocab_size %d make %.3g parameters, past "
        "the %.0e ladder handles",
        n_layer, n_embd, context, vocab_size, params, kMaxParameters));
  }
  return absl::OkStatus();
}

absl::Status GptConfig::ReadFrom(const KeyValueConfig& cfg) {
  RETURN_IF_ERROR(cfg.Get("n_layer", &n_layer));
  RETURN_IF_ERROR(cfg.Get("n_head", &n_head));
  RETURN_IF_ERROR(cfg.Get("n_embd", &n_embd));
  RETURN_IF_ERROR(cfg.Get("context", &context));
  RETURN_IF_ERROR(cfg.Get("vocab_size", &vocab_size));
  std::string kind = attention == AttentionKind::kFlash ? "flash" : "naive";
  RETURN_IF_ERROR(cfg.Get("attention", &kind));
  if (kind == "flash") {
    attention = AttentionKind::kFlash;
  } else if (kind == "naive") {
    attention = AttentionKind::kNaive;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(cfg.source(), ": 'attention' expects flash or naive, got '", kind, "'"));
  }
  return Validate();
}

std::string GptConfig::ToText() const {
  return absl::StrCat("n_layer = ", n_layer, "\nn_head = ", n_head, "\nn_embd = ", n_embd,
                      "\ncontext = ", context, "\nvocab_size = ", vocab_size,
                      "\nattention = ", attention == AttentionKind::kFlash ? "flash" : "naive",
                      "\n");
}

int64_t GptConfig::NumParameters() const {
  const int64_t C = n_embd;
  const int64_t per_layer = 12 * C * C + 13 * C;  // qkv, proj, fc, fcproj weights+biases, 2 LNs
  return int64_t{padded_vocab()} * C + int64_t{context} * C + n_layer * per_layer + 2 * C;
}

double GptConfig::TrainingFlopsPerToken() const {
  const double matmul_params = static_cast<double>(NumParameters()) - double(context) * n_embd;
  return 6.0 * matmul_params + 12.0 * n_layer * n_embd * context;
}

}  // namespace ladder
