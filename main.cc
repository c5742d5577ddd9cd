// ladder: train GPT models and serve them. This file only dispatches
// subcommands; each lives in src/cli/.
#include <cstdio>
#include <cstring>

#include "src/backend/cpu/blas_kernels.h"
#include "src/cli/commands.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"train", ladder::TrainCommand, "train a GPT from a config on a text file or token shards"},
    {"eval", ladder::EvalCommand, "score a text file with a trained model (loss, perplexity)"},
    {"generate", ladder::GenerateCommand, "sample text from a trained model"},
    {"serve", ladder::ServeCommand, "serve a model over an OpenAI-compatible HTTP API"},
    {"tokenizer", ladder::TokenizerCommand, "train | encode | decode a byte-level BPE tokenizer"},
    {"data", ladder::DataCommand, "prepare: turn a text file into token shards"},
    {"checkpoint", ladder::CheckpointCommand, "inspect | convert a training checkpoint"},
    {"import", ladder::ImportCommand,
     "hf | llmc: a Hugging Face or llm.c GPT-2 into a ladder model"},
    {"export", ladder::ExportCommand, "hf | gguf: a ladder model for Hugging Face or llama.cpp"},
    {"report", ladder::ReportCommand, "an HTML page and PNG plots of a training run's output"},
    {"plot", ladder::PlotCommand, "a tab-separated table drawn as lines into a PNG"},
    {"plan", ladder::PlanCommand, "predict memory, communication and bubble of a parallel layout"},
    {"bench", ladder::BenchCommand,
     "train | decode | matmul | ops | serve | checkpoint: measure against this machine's ceilings"},
    {"version", ladder::VersionCommand, "print the version and the compiled backends"},
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "usage: ladder <command> [flags]   (ladder <command> --help for its flags)\n\n"
               "commands:\n");
  for (const Subcommand& c : kSubcommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  // May restart this process with faster OpenBLAS kernels; before anything uses BLAS or MPI.
  ladder::EnsureBlasKernels(argv);
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage(stdout);
    return 0;
  }
  for (const Subcommand& c : kSubcommands) {
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "ladder: unknown command '%s' (see 'ladder --help')\n", argv[1]);
  return 2;
}
