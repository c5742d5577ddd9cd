// Sharded training checkpoints: every rank writes its piece of the model and
// optimizer in logical coordinates, rank 0 commits them atomically, and any
// layout can load them (docs/formats.md, "Checkpoints").
//
// Commit protocol (SaveCheckpoint):
//   1. rank 0 creates DIR/step-<N>.tmp/ (removing a stale one); barrier
//   2. every rank writes and fsyncs its shard file rank-<r>.bin there
//   3. all ranks agree that every shard was written (else rank 0 removes the
//      .tmp directory and every rank returns the error: nothing committed)
//   4. rank 0 writes the manifest last, fsyncs the directory, renames it to
//      step-<N>/, fsyncs DIR, replaces DIR/latest atomically, then deletes
//      committed checkpoints beyond the newest `keep`
// A crash at any moment leaves DIR/latest naming a complete checkpoint.
//
// Who writes what: weights and moments are the same on every DP rank, so DP
// rank 0 of each (stage, TP rank) writes them (under ZeRO-1 after gathering
// the moments' shards); tensors replicated over TP come from TP rank 0, the
// tied embedding from the first stage. Every rank still writes a shard file
// (a header alone when it has nothing to add).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/checkpoint/manifest.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"
#include "src/train/trainer.h"

namespace ladder {

struct CheckpointContext {
  const Grid* grid = nullptr;
  Communicator* world = nullptr;
  int zero = 0;  // recorded in the manifest
  // Rank 0 calls it with the .tmp directory before writing the manifest, to
  // add files of its own (the tokenizer); may be empty.
  std::function<absl::Status(const std::string& dir)> write_extra;
  // Fault injection: rank 0 dies (SIGKILL) after the shards are written and
  // before the commit.
  bool crash_before_commit = false;
};

// Collective over the world. Returns the committed directory.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, Trainer& trainer,
                                           const CheckpointContext& ctx, int keep);

// Loads into `trainer` (any layout; the model config must match) the
// checkpoint `path` names: a checkpoint directory (its `latest`) or one
// step-<N> directory. Every file and checksum this rank needs is verified
// before any weight is set. Unless `strict`, a corrupt checkpoint is skipped
// with a warning for the newest earlier one that loads. Collective over the
// world; returns the step directory loaded.
absl::StatusOr<std::string> LoadCheckpoint(const std::string& path, Trainer& trainer,
                                           const CheckpointContext& ctx, bool strict);

// True if `dir` holds a committed checkpoint (a `latest` file).
bool HasCheckpoint(const std::string& dir);

struct CheckpointSummary {
  std::string step_dir;
  Manifest manifest;
  int64_t bytes = 0;           // all shard files
  std::vector<float> weights;  // the whole model, ParameterTable(GptParameterSpecs) order
};
// Reads a checkpoint (directory or step directory) in one process and checks
// every file's size and checksum and every piece's checksum.
absl::StatusOr<CheckpointSummary> VerifyCheckpoint(const std::string& path);

}  // namespace ladder
