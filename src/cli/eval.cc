// ladder eval: mean next-token cross-entropy and perplexity of a text under a
// trained model. The text is encoded with the model's own tokenizer (no
// special tokens) and cut into consecutive non-overlapping windows of
// `context` tokens; within a window each token after the first is predicted
// from the ones before it, so every token but a window's first is scored once.
//
// With fp32 weights and KV cache (the default) the windows run through the
// training forward, kBatch at a time. With --weights int8 or --kv int8 they
// run through the serving forward (Gpt::PrefillLogits over the paged cache),
// so the perplexity is the one `serve` and `generate` would give. --kl also
// runs the model in fp32 through the serving forward and reports the mean
// KL divergence of the formats' next-token distributions from it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/cli/model_dir.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/model/gpt.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/logprobs.h"

namespace ladder {
namespace {

constexpr int kBatch = 8;  // windows per forward

struct EvalFlags {
  std::string model, text, device = "auto";
  FormatFlags formats;
  bool kl = false;
};

// Per-token losses of one window's next tokens through the serving forward,
// and the logits they came from (len - 1 rows of the vocabulary).
absl::Status CachedLosses(Gpt& model, KvCache& cache, const int32_t* window, int len,
                          std::vector<float>* losses, std::vector<float>* logits) {
  RETURN_IF_ERROR(
      model.PrefillLogits(std::vector<int32_t>(window, window + len - 1), cache, logits));
  const int V = model.config().vocab_size;
  losses->clear();
  for (int p = 0; p + 1 < len; ++p) {
    const absl::Span<const float> row(logits->data() + int64_t{p} * V, V);
    losses->push_back(-ScoreToken(row, window[p + 1], 0).logprob);
  }
  return absl::OkStatus();
}

// The same model in fp32 weights and KV cache through the serving forward:
// the distributions --kl compares against.
struct Reference {
  std::unique_ptr<Gpt> model;
  std::optional<KvCache> cache;
};

absl::Status Eval(const EvalFlags& f) {
  const std::string& model_dir = f.model;
  const std::string& text_path = f.text;
  if (model_dir.empty()) return absl::InvalidArgumentError("missing --model DIR");
  if (text_path.empty()) return absl::InvalidArgumentError("missing --text FILE");
  ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(model_dir));
  ASSIGN_OR_RETURN(std::string text, ReadFile(text_path));
  const std::vector<int32_t> ids = dir.tokenizer.Encode(text);
  const int T = dir.model.config.context;
  if (ids.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text_path, "' encodes to ", ids.size(), " tokens; need at least 2"));
  }
  ASSIGN_OR_RETURN(WeightFormat weights, ParseWeightFormat(f.formats.weights));
  ASSIGN_OR_RETURN(KvFormat kv, ParseKvFormat(f.formats.kv));
  const bool serving = f.kl || weights != WeightFormat::kF32 || kv != KvFormat::kF32 ||
                       f.formats.activations != "fp32";
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto model,
                   Gpt::Create(dir.model.config, backend.get(), serving ? 1 : kBatch, false));
  RETURN_IF_ERROR(model->SetWeights(dir.model.weights.data()));
  RETURN_IF_ERROR(model->QuantizeWeights(weights));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, model.get()));
  ASSIGN_OR_RETURN(KvCache cache,
                   KvCache::Create(dir.model.config, backend.get(), KvBlockPool::BlocksFor(T), kv));

  Reference ref;
  if (f.kl) {
    ASSIGN_OR_RETURN(ref.model, Gpt::Create(dir.model.config, backend.get(), 1, false));
    RETURN_IF_ERROR(ref.model->SetWeights(dir.model.weights.data()));
    ASSIGN_OR_RETURN(KvCache c, KvCache::Create(dir.model.config, backend.get(),
                                                KvBlockPool::BlocksFor(T), KvFormat::kF32));
    ref.cache.emplace(std::move(c));
  }

  double loss_sum = 0.0, kl_sum = 0.0;
  int64_t predicted = 0, windows = 0;
  std::vector<float> losses, logits, ref_losses, ref_logits;
  const int V = dir.model.config.vocab_size;
  // Full windows go kBatch at a time; a final partial window (>= 2 tokens) alone.
  const size_t full = ids.size() / T;
  auto score = [&](size_t first_window, int B, int len) -> absl::Status {
    if (serving) {
      for (int b = 0; b < B; ++b) {
        const int32_t* window = ids.data() + (first_window + b) * T;
        RETURN_IF_ERROR(CachedLosses(*model, cache, window, len, &losses, &logits));
        for (float l : losses) loss_sum += l;
        if (f.kl) {
          RETURN_IF_ERROR(
              CachedLosses(*ref.model, *ref.cache, window, len, &ref_losses, &ref_logits));
          for (int p = 0; p + 1 < len; ++p) {
            kl_sum += KlDivergence(absl::MakeConstSpan(ref_logits).subspan(int64_t{p} * V, V),
                                   absl::MakeConstSpan(logits).subspan(int64_t{p} * V, V));
          }
        }
        predicted += static_cast<int64_t>(losses.size());
      }
      windows += B;
      return absl::OkStatus();
    }
    std::vector<int32_t> in(size_t(B) * (len - 1)), tg(size_t(B) * (len - 1));
    for (int b = 0; b < B; ++b) {
      const int32_t* w = ids.data() + (first_window + b) * T;
      std::copy(w, w + len - 1, in.begin() + size_t(b) * (len - 1));
      std::copy(w + 1, w + len, tg.begin() + size_t(b) * (len - 1));
    }
    RETURN_IF_ERROR(model->Forward(in.data(), tg.data(), B, len - 1).status());
    RETURN_IF_ERROR(model->Losses(&losses));
    for (float l : losses) loss_sum += l;
    predicted += static_cast<int64_t>(losses.size());
    windows += B;
    return absl::OkStatus();
  };
  for (size_t w = 0; w < full; w += kBatch) {
    RETURN_IF_ERROR(score(w, static_cast<int>(std::min<size_t>(kBatch, full - w)), T));
  }
  const int tail = static_cast<int>(ids.size() - full * T);
  if (tail >= 2) RETURN_IF_ERROR(score(full, 1, tail));

  const double loss = loss_sum / static_cast<double>(predicted);
  std::fprintf(stderr, "scored %lld tokens in %lld windows of up to %d tokens\n",
               static_cast<long long>(predicted), static_cast<long long>(windows), T);
  const std::string kl =
      f.kl ? absl::StrFormat(",\"kl\":%.6g", kl_sum / static_cast<double>(predicted)) : "";
  std::printf("{\"loss\":%.6f,\"perplexity\":%.6f,\"tokens\":%lld,\"windows\":%lld%s}\n", loss,
              std::exp(loss), static_cast<long long>(predicted), static_cast<long long>(windows),
              kl.c_str());
  return absl::OkStatus();
}

}  // namespace

int EvalCommand(int argc, char** argv) {
  EvalFlags f;
  FlagSet flags("ladder eval", "Score a text file with a trained model: loss and perplexity.");
  flags.String("model", &f.model,
               "run directory, checkpoint or model file of a trained model (required)");
  flags.String("text", &f.text, "UTF-8 text file to score (required)");
  AddFormatFlags(flags, &f.formats);
  flags.Bool("kl", &f.kl,
             "also report the mean KL divergence KL(fp32 || these formats) of the next-token "
             "distributions from the same model's in fp32 weights and KV cache (both through "
             "the serving forward)");
  AddDeviceFlag(flags, &f.device);
  return RunCommand(flags, argc, argv, [&] { return Eval(f); });
}

}  // namespace ladder
