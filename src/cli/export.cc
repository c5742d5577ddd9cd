// ladder export hf|gguf: a ladder model (run directory, checkpoint or model
// file, as generate takes) for other tools:
//   hf MODEL DIR     a Hugging Face GPT-2 directory: config.json,
//                    model.safetensors (GPT2LMHeadModel's layout) and the
//                    tokenizer as vocab.json + merges.txt (hf_gpt2.h);
//   gguf MODEL FILE  one GGUF file for llama.cpp, matrices in f32, f16 or
//                    q8_0 (gguf_gpt2.h).
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/model_dir.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/formats/gguf_gpt2.h"
#include "src/formats/hf_gpt2.h"

namespace ladder {
namespace {

constexpr char kUsage[] =
    "usage: ladder export <format> [flags]   (ladder export <format> --help)\n\n"
    "formats:\n"
    "  hf     a Hugging Face GPT-2 directory: config.json, model.safetensors, vocab.json,\n"
    "         merges.txt\n"
    "  gguf   one GGUF file (architecture gpt2) for llama.cpp, in f32, f16 or q8_0\n";

absl::Status ExportHf(const std::string& model_path, const std::string& dir) {
  ASSIGN_OR_RETURN(ModelDir model, LoadModelDir(model_path));
  const GptConfig& cfg = model.model.config;
  // Everything is converted before anything is written.
  ASSIGN_OR_RETURN(std::string weights, GptWeightsToHf(cfg, model.model.weights));
  const std::string config = HfJsonFromGptConfig(cfg, model.tokenizer.end_of_text());
  ASSIGN_OR_RETURN(Tokenizer::Gpt2Files tokenizer,
                   model.tokenizer.Gpt2FileContents(dir + "/vocab.json"));
  MadeDirs made;  // removed again if nothing could be written into it
  RETURN_IF_ERROR(made.Create(dir));
  // All four staged before any replaces an old file (an export over an
  // older one never mixes the two); config.json, which loaders look for
  // first, goes last.
  RETURN_IF_ERROR(WriteFilesAtomically({{dir + "/vocab.json", std::move(tokenizer.vocab_json)},
                                        {dir + "/merges.txt", std::move(tokenizer.merges_txt)},
                                        {dir + "/model.safetensors", std::move(weights)},
                                        {dir + "/config.json", config}}));
  std::printf("exported %s (%d layers, n_embd %d, vocab %d) to %s\n", model_path.c_str(),
              cfg.n_layer, cfg.n_embd, cfg.vocab_size, dir.c_str());
  return absl::OkStatus();
}

int Hf(int argc, char** argv) {
  FlagSet flags("ladder export hf",
                "Write a ladder model (run directory, checkpoint or model file) as a Hugging Face "
                "GPT-2 directory DIR that GPT2LMHeadModel and GPT2Tokenizer load: config.json, "
                "model.safetensors (fp32), vocab.json, merges.txt.",
                "MODEL DIR");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (flags.positional().size() != 2) {
      return absl::InvalidArgumentError("expected two arguments: MODEL DIR");
    }
    return ExportHf(flags.positional()[0], flags.positional()[1]);
  });
}

absl::Status ExportGguf(const std::string& model_path, const std::string& file,
                        const std::string& type_name) {
  GgmlType type;
  if (type_name == "f32") {
    type = GgmlType::kF32;
  } else if (type_name == "f16") {
    type = GgmlType::kF16;
  } else if (type_name == "q8_0") {
    type = GgmlType::kQ8_0;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--type '", type_name, "' (expected f32, f16 or q8_0)"));
  }
  ASSIGN_OR_RETURN(ModelDir model, LoadModelDir(model_path));
  const std::string name = std::filesystem::path(model_path).filename().string();
  ASSIGN_OR_RETURN(std::string bytes,
                   GptToGguf(model.model.config, model.model.weights, model.tokenizer, type, name));
  RETURN_IF_ERROR(WriteFileAtomically(file, bytes));
  std::printf("exported %s to %s (%s, %.1f MiB)\n", model_path.c_str(), file.c_str(),
              type_name.c_str(), bytes.size() / 1048576.0);
  return absl::OkStatus();
}

int Gguf(int argc, char** argv) {
  std::string type = "f16";
  FlagSet flags("ladder export gguf",
                "Write a ladder model (run directory, checkpoint or model file) as one GGUF file "
                "(architecture gpt2, GPT-2's tokenizer) that llama.cpp loads.",
                "MODEL FILE");
  flags.String("type", &type,
               "the matrices' type: f32, f16 or q8_0 (norms, biases and positions stay f32)");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (flags.positional().size() != 2) {
      return absl::InvalidArgumentError("expected two arguments: MODEL FILE");
    }
    return ExportGguf(flags.positional()[0], flags.positional()[1], type);
  });
}

}  // namespace

int ExportCommand(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (sub == "hf") return Hf(argc - 1, argv + 1);
  if (sub == "gguf") return Gguf(argc - 1, argv + 1);
  const std::string problem =
      sub.empty() ? "missing format" : absl::StrCat("unknown format '", sub, "'");
  std::fprintf(stderr, "ladder export: %s (expected hf or gguf; see 'ladder export --help')\n",
               problem.c_str());
  return 2;
}

}  // namespace ladder
