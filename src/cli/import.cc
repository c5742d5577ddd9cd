// ladder import hf|llmc: another tool's GPT-2 into a ladder model directory
// (model.bin and the GPT-2 tokenizer) that generate, eval, serve and
// train --init-from use:
//   hf DIR OUT                a Hugging Face GPT-2 directory (config.json,
//                             model.safetensors, vocab.json + merges.txt;
//                             src/formats/hf_gpt2.h);
//   llmc MODEL TOKENIZER OUT  llm.c's model file and tokenizer file
//                             (src/formats/llmc.h).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/model_dir.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/formats/hf_gpt2.h"
#include "src/formats/llmc.h"
#include "src/formats/safetensors.h"
#include "src/tokenizer/tokenizer_dir.h"

namespace ladder {
namespace {

constexpr char kUsage[] =
    "usage: ladder import <format> [flags]   (ladder import <format> --help)\n\n"
    "formats:\n"
    "  hf     a Hugging Face GPT-2 directory: config.json, model.safetensors, vocab.json,\n"
    "         merges.txt\n"
    "  llmc   llm.c's model file (fp32 or bf16) and tokenizer file\n";

absl::Status ImportHf(const std::string& dir, const std::string& out) {
  ASSIGN_OR_RETURN(std::string config_text, ReadFile(dir + "/config.json"));
  ASSIGN_OR_RETURN(GptConfig cfg, GptConfigFromHfJson(config_text));
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Read(dir + "/model.safetensors"));
  ASSIGN_OR_RETURN(std::vector<float> weights, GptWeightsFromHf(file, cfg));
  ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizerDir(dir));
  if (tok.vocab_size() != cfg.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tok.vocab_size(),
                                                   " tokens but config.json's vocab_size is ",
                                                   cfg.vocab_size));
  }
  RETURN_IF_ERROR(SaveModelDir(out, cfg, weights, tok));
  std::printf("imported %s: %d layers, %d heads, n_embd %d, context %d, vocab %d (%.1fM "
              "parameters); wrote %s\n",
              dir.c_str(), cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.context, cfg.vocab_size,
              cfg.NumParameters() / 1e6, out.c_str());
  return absl::OkStatus();
}

int Hf(int argc, char** argv) {
  FlagSet flags("ladder import hf",
                "Convert a Hugging Face GPT-2 directory (config.json, model.safetensors in fp32, "
                "fp16 or bf16, vocab.json + merges.txt) into a ladder model directory OUT.",
                "DIR OUT");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (flags.positional().size() != 2) {
      return absl::InvalidArgumentError("expected two arguments: DIR OUT");
    }
    return ImportHf(flags.positional()[0], flags.positional()[1]);
  });
}

absl::Status ImportLlmc(const std::string& model_path, const std::string& tokenizer_path,
                        const std::string& out) {
  ASSIGN_OR_RETURN(std::string model_bytes, ReadFile(model_path));
  ASSIGN_OR_RETURN(LlmcModel model, ParseLlmcModel(model_bytes, model_path));
  ASSIGN_OR_RETURN(std::string tokenizer_bytes, ReadFile(tokenizer_path));
  ASSIGN_OR_RETURN(Tokenizer tok, ParseLlmcTokenizer(tokenizer_bytes, tokenizer_path));
  const GptConfig& cfg = model.config;
  if (tok.vocab_size() != cfg.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tok.vocab_size(),
                                                   " tokens but the model's vocabulary is ",
                                                   cfg.vocab_size));
  }
  RETURN_IF_ERROR(SaveModelDir(out, cfg, model.weights, tok));
  std::printf("imported %s: %d layers, %d heads, n_embd %d, context %d, vocab %d (%zu merges "
              "recovered); wrote %s\n",
              model_path.c_str(), cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.context,
              cfg.vocab_size, tok.merges().size(), out.c_str());
  return absl::OkStatus();
}

int Llmc(int argc, char** argv) {
  FlagSet flags("ladder import llmc",
                "Convert llm.c's model file (gpt2_124M.bin, fp32 or bf16) and tokenizer file "
                "(gpt2_tokenizer.bin) into a ladder model directory OUT.",
                "MODEL TOKENIZER OUT");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (flags.positional().size() != 3) {
      return absl::InvalidArgumentError("expected three arguments: MODEL TOKENIZER OUT");
    }
    return ImportLlmc(flags.positional()[0], flags.positional()[1], flags.positional()[2]);
  });
}

}  // namespace

int ImportCommand(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (sub == "hf") return Hf(argc - 1, argv + 1);
  if (sub == "llmc") return Llmc(argc - 1, argv + 1);
  const std::string problem =
      sub.empty() ? "missing format" : absl::StrCat("unknown format '", sub, "'");
  std::fprintf(stderr, "ladder import: %s (expected hf or llmc; see 'ladder import --help')\n",
               problem.c_str());
  return 2;
}

}  // namespace ladder
