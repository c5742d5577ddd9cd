// FaultEnv: an Env (src/train/env.h) that injects one deliberate failure,
// for recovery tests and for teaching what each one costs. `ladder train
// --inject-fault SPEC` runs under one; C++ tests may construct their own.
//   kill:RANK@STEP           rank RANK kills itself (SIGKILL) once it is done
//                            with step STEP, as a crashed node would
//   nan@STEP                 step STEP's gradient turns NaN (once): the guard
//                            skips the update
//   crash-during-save@STEP   rank 0 dies inside the checkpoint of step STEP,
//                            after the shards are written, before the commit
//                            (when it is about to write the manifest)
//   crash-after-save@STEP    rank 0 dies once the checkpoint of step STEP is
//                            committed (its `latest` names it), before
//                            anything else: the step's metrics line must
//                            already be written, or the resumed run's
//                            metrics.jsonl would lack it
//   enospc@STEP              every shard write of step STEP's checkpoint fails
//                            as on a full disk
//   slow:RANK:MS             rank RANK sleeps MS milliseconds after computing
//                            every step (a straggler: the others wait for it)
//   slow-data:MS             every rank's loading of every training batch
//                            takes MS milliseconds more, as a loader
//                            waiting on storage would (src/train/batch_reader.h)
//   kill-node:NODE@STEP      node NODE (src/parallel/nodes.h) is gone for
//                            good: once done with step STEP its first rank
//                            deletes the node's line (line NODE, 0-based)
//                            from the supervisor's nodes file, named by
//                            LADDER_NODES_FILE (scripts/train_resilient.sh),
//                            and every rank of the node kills itself after
//                            computing step STEP + 1 (which is never
//                            recorded). The run's all-gather of that step
//                            lies between: the line is gone before any
//                            rank dies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/train/env.h"

namespace ladder {

class FaultEnv : public Env {
 public:
  // The empty spec is an Env with no fault; anything malformed is
  // InvalidArgument naming it and the forms above.
  static absl::StatusOr<std::unique_ptr<FaultEnv>> Parse(const std::string& spec);

  absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) override;
  absl::Status AfterGradients(int64_t step, Backend& backend, const Tensor& grads) override;
  void LoadingBatch() override;
  void AfterStep(int rank, int64_t step) override;
  void StepDone(int rank, int64_t step) override;

 private:
  FaultEnv() = default;
  // kill-node: deletes the node's line from LADDER_NODES_FILE, if set.
  void MarkNodeGone() const;
  int kill_rank_ = -1;
  int64_t kill_step_ = -1, nan_step_ = -1, crash_save_step_ = -1, crash_after_save_step_ = -1;
  int64_t enospc_step_ = -1;
  int kill_node_ = -1, ranks_per_node_ = 1;
  int slow_rank_ = -1;
  int64_t slow_ms_ = 0;
  int64_t slow_data_ms_ = 0;
  bool nan_done_ = false;  // the training thread's only
};

}  // namespace ladder
