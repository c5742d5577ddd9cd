// Env: the seam between a training run and the world that can fail under it.
//
// A run touches the outside world in a few places that recovery depends on:
// it writes checkpoint files, it finishes steps on one rank among many, and
// it reduces gradients that may come back corrupt. Production code reaches
// them through an Env (LevelDB's Env is the model): Env::Default() does the
// plain thing, and a test (or `--inject-fault`, src/train/fault_env.h)
// passes an Env of its own that fails a write as a full disk would, kills or
// slows a rank, or turns a gradient into NaN. No production struct carries
// a fault field; the faults live only in the Env a test owns.
//
// Threads: WriteFileAtomically may be called from the checkpoint writer's
// background thread, and LoadingBatch from the loading thread of
// --prefetch (src/train/batch_reader.h), while the training thread calls
// the step hooks, so an Env must be safe for that (the default one holds
// no state). The Env must
// outlive every object it was passed to.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/core/tensor.h"

namespace ladder {

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide plain Env; never null, never deleted.
  static Env* Default();

  // Writes `contents` to path.tmp, flushes it to disk and renames it over
  // `path` (src/core/file_util.h): readers see the old file or the new one.
  // Every file of a checkpoint is written through this call.
  virtual absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

  // The summed gradient of `step` (1-based: the update it is about to
  // become), after the data-parallel reduction and before the norm that the
  // step guard judges. May change it through `backend`. Default: nothing.
  virtual absl::Status AfterGradients(int64_t step, Backend& backend, const Tensor& grads);

  // A batch of training data is about to be read, on the thread that reads
  // it. Default: nothing.
  virtual void LoadingBatch();

  // Rank `rank` finished computing `step` (before the run decides on a
  // checkpoint). Default: nothing.
  virtual void AfterStep(int rank, int64_t step);

  // Rank `rank` is done with everything of `step`: its metrics are written
  // and its checkpoint, if one was due, committed (an asynchronous one may
  // still be writing). Default: nothing.
  virtual void StepDone(int rank, int64_t step);
};

}  // namespace ladder
