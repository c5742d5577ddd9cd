// ladder checkpoint inspect DIR | convert DIR OUT: look into a training
// checkpoint without training (src/checkpoint/checkpoint.h). DIR is a
// checkpoint directory (its `latest` is used) or one step-<N> directory.
#include "src/checkpoint/checkpoint.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/status.h"

namespace ladder {
namespace {

constexpr char kUsage[] =
    "usage: ladder checkpoint inspect DIR        summary of the manifest; verifies every "
    "checksum\n"
    "       ladder checkpoint convert DIR OUT    writes OUT/model.bin (and the tokenizer) for "
    "generate and eval\n";

absl::Status Inspect(const std::string& dir) {
  ASSIGN_OR_RETURN(CheckpointSummary c, VerifyCheckpoint(dir));
  // The tokenizer has no checksum in the manifest: it must at least load,
  // with the model's vocabulary.
  ASSIGN_OR_RETURN(const Tokenizer tokenizer, LoadTokenizerFor(c.manifest.model, c.step_dir));
  const Manifest& m = c.manifest;
  std::printf("checkpoint %s\n", c.step_dir.c_str());
  std::printf("step %lld, %lld tokens seen, seed %llu, data position epoch %llu window %llu\n",
              static_cast<long long>(m.step), static_cast<long long>(m.tokens),
              static_cast<unsigned long long>(m.seed),
              static_cast<unsigned long long>(m.loader_epoch),
              static_cast<unsigned long long>(m.loader_index));
  std::printf("model: %d layers, %d heads, width %d, context %d, vocab %d: %lld parameters\n",
              m.model.n_layer, m.model.n_head, m.model.n_embd, m.model.context, m.model.vocab_size,
              static_cast<long long>(m.model.NumParameters()));
  std::printf("written by dp %d x tp %d x pp %d, ZeRO-%d: %zu shard files, %zu pieces, %.1f MiB\n",
              m.dp, m.tp, m.pp, m.zero, m.files.size(), m.pieces.size(), c.bytes / 1048576.0);
  std::printf("tokenizer: %s, %d tokens\n",
              tokenizer.kind() == TokenizerKind::kGpt2 ? "GPT-2's" : "ladder's",
              tokenizer.vocab_size());
  std::printf("every file size and checksum verified; the tokenizer loads\n");
  return absl::OkStatus();
}

absl::Status Convert(const std::string& dir, const std::string& out) {
  ASSIGN_OR_RETURN(CheckpointSummary c, VerifyCheckpoint(dir));
  // Loaded (so verified) before anything is written, then saved afresh.
  ASSIGN_OR_RETURN(const Tokenizer tokenizer, LoadTokenizerFor(c.manifest.model, c.step_dir));
  RETURN_IF_ERROR(SaveModelDir(out, c.manifest.model, c.weights, tokenizer));
  std::printf("wrote %s/model.bin (step %lld)\n", out.c_str(),
              static_cast<long long>(c.manifest.step));
  return absl::OkStatus();
}

}  // namespace

int CheckpointCommand(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const bool inspect = sub == "inspect", convert = sub == "convert";
  if (!inspect && !convert) {
    std::fprintf(stderr, "ladder checkpoint: %s (expected inspect or convert)\n",
                 sub.empty() ? "missing subcommand"
                             : absl::StrCat("unknown subcommand '", sub, "'").c_str());
    return 2;
  }
  FlagSet flags(absl::StrCat("ladder checkpoint ", sub),
                inspect ? "Summarize a checkpoint and verify every checksum."
                        : "Write a checkpoint's weights as one model file (OUT/model.bin).",
                inspect ? "DIR" : "DIR OUT");
  return RunCommand(flags, argc - 1, argv + 1, [&]() -> absl::Status {
    const std::vector<std::string>& args = flags.positional();
    if (args.size() != (inspect ? 1u : 2u)) {
      return absl::InvalidArgumentError(inspect ? "expected one argument: DIR"
                                                : "expected two arguments: DIR OUT");
    }
    return inspect ? Inspect(args[0]) : Convert(args[0], args[1]);
  });
}

}  // namespace ladder
