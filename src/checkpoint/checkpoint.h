// Sharded training checkpoints: every rank writes its piece of the model and
// optimizer in logical coordinates, rank 0 commits them atomically, and any
// layout can load them (docs/formats.md, "Checkpoints").
//
// Commit protocol (CheckpointWriter):
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

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/checkpoint/manifest.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"
#include "src/train/env.h"
#include "src/train/trainer.h"

namespace ladder {

struct CheckpointContext {
  const Grid* grid = nullptr;
  Communicator* world = nullptr;
  int zero = 0;  // recorded in the manifest
  // Rank 0 calls it with the .tmp directory before writing the manifest, to
  // add files of its own (the tokenizer); may be empty.
  std::function<absl::Status(const std::string& dir)> write_extra;
  // Every file of a checkpoint is written through it (src/train/env.h).
  Env* env = Env::Default();
};

// One rank's part of a checkpoint, in host memory: its shard file's bytes
// (docs/formats.md) and the whole manifest (every rank's pieces).
struct CheckpointSnapshot {
  Manifest manifest;
  std::string shard;
};
// Copies the trainer's state at its current step into host memory and
// checksums every piece. Collective over the world (gathers ZeRO shards and
// every rank's piece list), so every rank gets the same manifest. Disk
// checkpoints (CheckpointWriter) and memory ones (src/checkpoint/
// memory_checkpoint.h) are both made of it.
absl::StatusOr<CheckpointSnapshot> TakeSnapshot(Trainer& trainer, const CheckpointContext& ctx);

// Where a checkpoint's shard files are read from while loading: a step
// directory, or the files themselves in memory. Read copies `bytes` bytes at
// `offset` of file `file` (an index into Manifest::files), checking the
// file's size and magic first; Name names the file in errors.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  virtual std::string Name(int file) const = 0;
  virtual absl::Status Read(int file, int64_t offset, int64_t bytes, char* out) = 0;
  // True when every piece's checksum was verified before (CheckShardPieces).
  virtual bool checked() const { return false; }
};

// Saves checkpoints, one at a time. Start takes a snapshot of the trainer's
// state at its current step into host memory (collective: gathers ZeRO
// shards and every rank's piece list); the shard files are then written
// either at once or, with `async`, by a background thread while training
// goes on. The commit (steps 3 and 4 above) is collective too: Poll, called
// by every rank after every step, commits once every rank's file is written;
// Finish waits for it. Only the snapshot stalls training in async mode.
class CheckpointWriter {
 public:
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  ~CheckpointWriter();

  // Finishes a pending save first.
  absl::Status Start(const std::string& dir, Trainer& trainer, const CheckpointContext& ctx,
                     int keep, bool async);
  // The directory committed now, or "" if none (nothing pending, or a shard
  // still being written somewhere).
  absl::StatusOr<std::string> Poll();
  // Waits for the pending save and commits it; "" if none was pending. A
  // failed write is reported (the previous checkpoint stays the latest).
  absl::StatusOr<std::string> Finish();

 private:
  struct Pending {
    CheckpointContext ctx;
    std::string dir, tmp, final_dir;
    int keep = 1;
    Manifest manifest;  // rank 0's, complete
    absl::Status wrote;
    std::atomic<bool> written{false};
  };
  std::unique_ptr<Pending> pending_;
  std::thread thread_;
};

// Loads into `trainer` (any layout; the model config must match) the
// checkpoint `path` names: a checkpoint directory (its `latest`) or one
// step-<N> directory. Every file and checksum this rank needs is verified
// before any weight is set. Given a checkpoint directory and not `strict`, a
// step that does not load is skipped with a warning for the next of the
// other committed steps, newest first, that does (a step directory given
// alone has no fallback). A step of a different model (InvalidArgument)
// stops the search: that is a mistake, not damage. Collective over the
// world; returns the step directory loaded.
absl::StatusOr<std::string> LoadCheckpoint(const std::string& path, Trainer& trainer,
                                           const CheckpointContext& ctx, bool strict);

// Loads the checkpoint `m` describes from its shard files held in memory
// (`shards[i]` is the file Manifest::files[i]; the layout may differ, as
// with LoadCheckpoint). Verifies sizes, magic and every piece's checksum
// before any weight is set, the checksums only when not `checked` (every
// shard passed CheckShardPieces already); `where` names the copy in
// errors. Collective over the world: every rank succeeds or all return an
// error.
absl::Status LoadShards(const Manifest& m, const std::vector<absl::string_view>& shards,
                        bool checked, const std::string& where, Trainer& trainer,
                        const CheckpointContext& ctx);

// OK if `bytes` is a shard file of the size `expected` with the shard magic;
// else DataLoss naming `name`.
absl::Status CheckShardBytes(absl::string_view bytes, int64_t expected, const std::string& name);
// CheckShardBytes, then every checksum of the pieces `m` places in file
// `file`: whether a copy of that shard is intact.
absl::Status CheckShardPieces(absl::string_view bytes, const Manifest& m, int file,
                              const std::string& name);

// All ranks learn whether any rank failed (collective over `world`): OK if
// none did; else the failing rank's own status on that rank, and on the
// others Aborted "<what>: rank R failed" (R the highest failing rank).
absl::Status Agree(Communicator* world, const absl::Status& mine, const char* what);

// The file name of world rank `rank`'s shard ("rank-00003.bin").
std::string ShardFileName(int rank);

// The name of step `step`'s directory inside a checkpoint directory
// ("step-00000042"; "step-00000042.tmp" while it is being written).
std::string CheckpointStepName(int64_t step);

// What a checkpoint directory's `latest` holds once step `step` is
// committed: its step directory's name and a newline (disk and memory
// checkpoints alike; LatestCheckpointStep reads it back).
std::string LatestFileContents(int64_t step);

// Commits step `step` of the checkpoint directory `dir`, on disk or in
// memory alike: writes `manifest` into the step directory being written
// (CheckpointStepName(step) + ".tmp") through `write` (a
// WriteFileAtomically: an Env's, so tests can fail it), renames that
// directory to its final name (replacing a same-step one from an earlier
// attempt), points `latest` at it, then removes all but the max(keep, 1)
// newest committed steps. With `durable`, each change is flushed to disk
// (the directories fsynced) before the next. On failure, Internal naming
// the checkpoint, and `latest` still names the step it named before.
using FileWriter =
    std::function<absl::Status(const std::string& path, const std::string& contents)>;
absl::Status CommitCheckpointStep(const std::string& dir, int64_t step, const std::string& manifest,
                                  int keep, const FileWriter& write, bool durable);

// The step of the checkpoint `dir`'s `latest` names; NotFound when there is
// none, DataLoss when `latest` does not name a step directory.
absl::StatusOr<int64_t> LatestCheckpointStep(const std::string& dir);

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
