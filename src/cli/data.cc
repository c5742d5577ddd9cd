// ladder data prepare: tokenize a text file once into train/validation token
// shards (plus the tokenizer that made them), so training runs skip that work.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/data/dataset.h"
#include "src/data/shards.h"
#include "src/tokenizer/bpe.h"

namespace ladder {
namespace {

constexpr char kUsage[] =
    "usage: ladder data <subcommand> [flags]   (ladder data <subcommand> --help)\n\n"
    "subcommands:\n"
    "  prepare  turn a text file into train/validation token shards\n";

struct PrepareFlags {
  std::string input, out, tokenizer;
  int64_t vocab_size = 4096;
  double val_fraction = kDefaultValFraction;
};

absl::Status Prepare(const PrepareFlags& f, const FlagSet& flags) {
  if (f.input.empty()) return absl::InvalidArgumentError("missing --input");
  if (f.out.empty()) return absl::InvalidArgumentError("missing --out");
  if (flags.IsSet("tokenizer") && flags.IsSet("vocab-size")) {
    return absl::InvalidArgumentError("--tokenizer and --vocab-size exclude each other");
  }
  if (f.vocab_size < 256 || f.vocab_size > Tokenizer::kMaxVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab-size ", f.vocab_size, " outside [256, ",
                                                   Tokenizer::kMaxVocabSize, "]"));
  }
  if (!(f.val_fraction >= 0 && f.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction ", f.val_fraction, " outside [0, 1)"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(f.input));
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input '", f.input, "' is empty: there is nothing to tokenize"));
  }

  Tokenizer tok = Tokenizer::ByteLevel();
  if (!f.tokenizer.empty()) {
    ASSIGN_OR_RETURN(tok, Tokenizer::Load(f.tokenizer));
  } else if (f.vocab_size > 256) {
    Timer timer;
    ASSIGN_OR_RETURN(tok, Tokenizer::Train(text, static_cast<int>(f.vocab_size)));
    std::printf("tokenizer: learned %zu merges (vocab size %d) in %.2f s\n", tok.merges().size(),
                tok.vocab_size(), timer.Seconds());
  }

  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", f.out, ": ", ec.message()));
  }
  Timer timer;
  const TokenSplits splits = SplitTrainVal(tok.Encode(text), f.val_fraction);
  const double encode_seconds = timer.Seconds();
  RETURN_IF_ERROR(tok.Save(f.out + "/" + kTokenizerName));
  RETURN_IF_ERROR(WriteShard(f.out + "/" + kTrainShardName, splits.train, tok.vocab_size()));
  RETURN_IF_ERROR(WriteShard(f.out + "/" + kValShardName, splits.val, tok.vocab_size()));
  const size_t total = splits.train.size() + splits.val.size();
  std::printf(
      "%s: %zu bytes -> %zu tokens (%.2f bytes/token, encoded in %.2f s); "
      "%s %zu, %s %zu tokens; vocab size %d\n",
      f.out.c_str(), text.size(), total,
      total ? static_cast<double>(text.size()) / static_cast<double>(total) : 0.0, encode_seconds,
      kTrainShardName, splits.train.size(), kValShardName, splits.val.size(), tok.vocab_size());
  return absl::OkStatus();
}

int PrepareCommand(int argc, char** argv) {
  PrepareFlags f;
  FlagSet flags("ladder data prepare",
                "Tokenize a text file into DIR/train.bin and DIR/val.bin, and save the tokenizer "
                "used as DIR/tokenizer.bpe.");
  flags.String("input", &f.input, "text file (any bytes; UTF-8 text is what BPE is made for)");
  flags.String("out", &f.out, "directory to write");
  flags.String("tokenizer", &f.tokenizer, "tokenizer file to use instead of training one");
  flags.Int("vocab-size", &f.vocab_size,
            "vocabulary of the tokenizer trained on --input "
            "(256 = plain bytes)");
  flags.Double("val-fraction", &f.val_fraction,
               "share of 4096-token blocks, spread evenly, kept for validation");
  return RunCommand(flags, argc, argv, [&] { return Prepare(f, flags); });
}

}  // namespace

int DataCommand(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (sub == "prepare") return PrepareCommand(argc - 1, argv + 1);
  const std::string problem =
      sub.empty() ? "missing subcommand" : absl::StrCat("unknown subcommand '", sub, "'");
  std::fprintf(stderr, "ladder data: %s (expected prepare; see 'ladder data --help')\n",
               problem.c_str());
  return 2;
}

}  // namespace ladder
