// The subcommands of the `ladder` binary. Each takes the arguments after its
// own name and returns the process exit code (0 ok, 1 runtime failure,
// 2 bad input). One file per subcommand in src/cli/.
#pragma once

namespace ladder {

int TrainCommand(int argc, char** argv);      // train.cc
int EvalCommand(int argc, char** argv);       // eval.cc
int GenerateCommand(int argc, char** argv);   // generate.cc
int ServeCommand(int argc, char** argv);      // serve.cc: the OpenAI-compatible server
int TokenizerCommand(int argc, char** argv);  // tokenizer.cc: train | encode | decode
int DataCommand(int argc, char** argv);       // data.cc: prepare
int BenchCommand(int argc, char** argv);  // bench.cc: train, and dispatches the others below
int BenchCheckpointCommand(int argc, char** argv);  // bench_checkpoint.cc
int BenchDecodeCommand(int argc, char** argv);      // bench_decode.cc
int BenchMatmulCommand(int argc, char** argv);      // bench_matmul.cc
int BenchOpsCommand(int argc, char** argv);         // bench_ops.cc
int BenchServeCommand(int argc, char** argv);       // bench_serve.cc
int PlanCommand(int argc, char** argv);             // plan.cc
int ReportCommand(int argc, char** argv);           // report.cc: the HTML report of a run
int PlotCommand(int argc, char** argv);             // plot.cc: a table as a PNG of lines
int CheckpointCommand(int argc, char** argv);       // checkpoint.cc: inspect | convert
int ImportCommand(int argc, char** argv);           // import.cc: hf | llmc
int ExportCommand(int argc, char** argv);           // export.cc: hf | gguf
int VersionCommand(int argc, char** argv);          // version.cc

}  // namespace ladder
