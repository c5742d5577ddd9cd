#include "src/train/run_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

int RunConfig::AccumulationSteps() const {
  const int64_t micro = int64_t{batch_size} * model.context;
  return total_batch_tokens <= 0 ? 1 : static_cast<int>(total_batch_tokens / micro);
}

absl::Status RunConfig::Validate() const {
  RETURN_IF_ERROR(model.Validate());
  const int64_t micro = int64_t{batch_size} * model.context;
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be positive, got ", batch_size));
  }
  if (total_batch_tokens < 0 || (total_batch_tokens > 0 && total_batch_tokens % micro != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("total_batch_tokens (", total_batch_tokens,
                     ") must be a positive multiple of batch_size * context (", micro, ")"));
  }
  if (steps <= 0)
    return absl::InvalidArgumentError(absl::StrCat("steps must be positive, got ", steps));
  if (!(lr > 0) || !std::isfinite(lr) || min_lr < 0 || min_lr > lr) {
    return absl::InvalidArgumentError(
        absl::StrCat("need 0 <= min_lr <= lr and lr > 0, got lr ", lr, ", min_lr ", min_lr));
  }
  if (warmup_steps < 0 || eval_every < 0 || eval_batches <= 0 || log_every <= 0) {
    return absl::InvalidArgumentError(
        "warmup_steps and eval_every must be >= 0, eval_batches and log_every > 0");
  }
  // Each bound names its key (and `!(x >= 0)` also catches NaN).
  struct Bound {
    const char* key;
    double value;
    bool ok;
    const char* want;
  };
  for (const Bound& b : {Bound{"beta1", beta1, beta1 >= 0 && beta1 < 1, "in [0, 1)"},
                         Bound{"beta2", beta2, beta2 >= 0 && beta2 < 1, "in [0, 1)"},
                         Bound{"eps", eps, eps > 0 && std::isfinite(eps), "positive and finite"},
                         Bound{"weight_decay", weight_decay,
                               weight_decay >= 0 && std::isfinite(weight_decay), ">= 0 and finite"},
                         Bound{"grad_clip", grad_clip, grad_clip >= 0, ">= 0"}}) {
    if (!b.ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(b.key, " must be ", b.want, ", got ", b.value));
    }
  }
  if (!(val_fraction > 0 && val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be in (0, 1), got ", val_fraction));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunConfig> LoadRunConfig(const std::string& path) {
  ASSIGN_OR_RETURN(KeyValueConfig kv, KeyValueConfig::ParseFile(path));
  RunConfig rc;
  RETURN_IF_ERROR(rc.model.ReadFrom(kv));
  RETURN_IF_ERROR(kv.Get("batch_size", &rc.batch_size));
  RETURN_IF_ERROR(kv.Get("total_batch_tokens", &rc.total_batch_tokens));
  RETURN_IF_ERROR(kv.Get("steps", &rc.steps));
  RETURN_IF_ERROR(kv.Get("lr", &rc.lr));
  RETURN_IF_ERROR(kv.Get("min_lr", &rc.min_lr));
  RETURN_IF_ERROR(kv.Get("warmup_steps", &rc.warmup_steps));
  RETURN_IF_ERROR(kv.Get("beta1", &rc.beta1));
  RETURN_IF_ERROR(kv.Get("beta2", &rc.beta2));
  RETURN_IF_ERROR(kv.Get("eps", &rc.eps));
  RETURN_IF_ERROR(kv.Get("weight_decay", &rc.weight_decay));
  RETURN_IF_ERROR(kv.Get("grad_clip", &rc.grad_clip));
  RETURN_IF_ERROR(kv.Get("eval_every", &rc.eval_every));
  RETURN_IF_ERROR(kv.Get("eval_batches", &rc.eval_batches));
  RETURN_IF_ERROR(kv.Get("log_every", &rc.log_every));
  int64_t seed = static_cast<int64_t>(rc.seed);
  RETURN_IF_ERROR(kv.Get("seed", &seed));
  rc.seed = static_cast<uint64_t>(seed);
  RETURN_IF_ERROR(kv.Get("data", &rc.data));
  RETURN_IF_ERROR(kv.Get("tokenizer", &rc.tokenizer));
  RETURN_IF_ERROR(kv.Get("val_fraction", &rc.val_fraction));
  RETURN_IF_ERROR(kv.CheckAllRead());
  return rc;
}

}  // namespace ladder
