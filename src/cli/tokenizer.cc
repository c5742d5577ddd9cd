// ladder tokenizer train | encode | decode: learn a byte-level BPE tokenizer
// and apply it to stdin (for inspection and shell pipelines).
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/cli/commands.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/tokenizer_dir.h"

namespace ladder {
namespace {

constexpr char kUsage[] =
    "usage: ladder tokenizer <subcommand> [flags]   (ladder tokenizer <subcommand> --help)\n\n"
    "subcommands:\n"
    "  train   learn a byte-level BPE tokenizer from a text file\n"
    "  encode  read bytes on stdin, print their token ids on one line\n"
    "  decode  read token ids on stdin, write their bytes to stdout\n";

absl::Status Require(const std::string& value, absl::string_view flag) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("missing --", flag));
}

absl::StatusOr<std::string> ReadStdin() {
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) data.append(buf, n);
  if (std::ferror(stdin)) return absl::DataLossError("error reading stdin");
  return data;
}

absl::Status WriteStdout(const std::string& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() ||
      std::fflush(stdout) != 0) {
    return absl::DataLossError("error writing stdout");
  }
  return absl::OkStatus();
}

int Train(int argc, char** argv) {
  std::string input, out;
  int64_t vocab_size = 4096;
  FlagSet flags("ladder tokenizer train", "Learn a byte-level BPE tokenizer from a text file.");
  flags.String("input", &input, "text file to learn from");
  flags.Int("vocab-size", &vocab_size, "256 byte ids plus one per merge learned");
  flags.String("out", &out, "tokenizer file to write");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    RETURN_IF_ERROR(Require(input, "input"));
    RETURN_IF_ERROR(Require(out, "out"));
    if (vocab_size < 256 || vocab_size > Tokenizer::kMaxVocabSize) {
      return absl::InvalidArgumentError(absl::StrCat("--vocab-size ", vocab_size, " outside [256, ",
                                                     Tokenizer::kMaxVocabSize, "]"));
    }
    ASSIGN_OR_RETURN(std::string text, ReadFile(input));
    Timer timer;
    ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Train(text, static_cast<int>(vocab_size)));
    const double seconds = timer.Seconds();
    RETURN_IF_ERROR(tok.Save(out));
    std::printf("learned %zu merges (vocab size %d) from %zu bytes in %.2f s; wrote %s\n",
                tok.merges().size(), tok.vocab_size(), text.size(), seconds, out.c_str());
    return absl::OkStatus();
  });
}

// `ladder tokenizer encode|decode`: loads --tokenizer, then writes
// transform(tokenizer, stdin) to stdout.
using StdinTransform =
    std::function<absl::StatusOr<std::string>(const Tokenizer&, const std::string&)>;
int RunOnStdin(int argc, char** argv, const char* command, const char* summary,
               const StdinTransform& transform) {
  std::string path;
  FlagSet flags(command, summary);
  flags.String("tokenizer", &path,
               "tokenizer file (ladder's), or a directory holding tokenizer.bpe or vocab.json + "
               "merges.txt (GPT-2's)");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    RETURN_IF_ERROR(Require(path, "tokenizer"));
    ASSIGN_OR_RETURN(Tokenizer tok, std::filesystem::is_directory(path) ? LoadTokenizerDir(path)
                                                                        : Tokenizer::Load(path));
    ASSIGN_OR_RETURN(std::string input, ReadStdin());
    ASSIGN_OR_RETURN(std::string output, transform(tok, input));
    return WriteStdout(output);
  });
}

absl::StatusOr<std::string> EncodeText(const Tokenizer& tok, const std::string& text) {
  std::string line;
  for (int32_t id : tok.Encode(text)) absl::StrAppend(&line, line.empty() ? "" : " ", id);
  return line + '\n';
}

absl::StatusOr<std::string> DecodeIds(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view word :
       absl::StrSplit(text, absl::ByAnyChar(" \t\n\v\f\r"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(word, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("not a token id: '", word, "'"));
    }
    ids.push_back(id);
  }
  return tok.Decode(ids);
}

}  // namespace

int TokenizerCommand(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (sub == "train") return Train(argc - 1, argv + 1);
  if (sub == "encode") {
    return RunOnStdin(
        argc - 1, argv + 1, "ladder tokenizer encode",
        "Read bytes on stdin and print their token ids, space-separated, on one line.", EncodeText);
  }
  if (sub == "decode") {
    return RunOnStdin(argc - 1, argv + 1, "ladder tokenizer decode",
                      "Read whitespace-separated token ids on stdin and write their bytes to "
                      "stdout.",
                      DecodeIds);
  }
  const std::string problem =
      sub.empty() ? "missing subcommand" : absl::StrCat("unknown subcommand '", sub, "'");
  std::fprintf(stderr,
               "ladder tokenizer: %s (expected train, encode or decode; see 'ladder tokenizer "
               "--help')\n",
               problem.c_str());
  return 2;
}

}  // namespace ladder
