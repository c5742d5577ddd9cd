#include "src/train/fault_env.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/checkpoint/checkpoint.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/parallel/nodes.h"

namespace ladder {

absl::StatusOr<std::unique_ptr<FaultEnv>> FaultEnv::Parse(const std::string& spec) {
  std::unique_ptr<FaultEnv> f(new FaultEnv());
  if (spec.empty()) return f;
  int rank = 0;
  long long a = 0;
  char tail = 0;
  const char* s = spec.c_str();
  if (std::sscanf(s, "kill:%d@%lld%c", &rank, &a, &tail) == 2 && rank >= 0 && a >= 1) {
    f->kill_rank_ = rank;
    f->kill_step_ = a;
  } else if (std::sscanf(s, "nan@%lld%c", &a, &tail) == 1 && a >= 1) {
    f->nan_step_ = a;
  } else if (std::sscanf(s, "crash-during-save@%lld%c", &a, &tail) == 1 && a >= 1) {
    f->crash_save_step_ = a;
  } else if (std::sscanf(s, "crash-after-save@%lld%c", &a, &tail) == 1 && a >= 1) {
    f->crash_after_save_step_ = a;
  } else if (std::sscanf(s, "enospc@%lld%c", &a, &tail) == 1 && a >= 1) {
    f->enospc_step_ = a;
  } else if (std::sscanf(s, "kill-node:%d@%lld%c", &rank, &a, &tail) == 2 && rank >= 0 && a >= 1) {
    ASSIGN_OR_RETURN(f->ranks_per_node_, RanksPerNode());
    f->kill_node_ = rank;
    f->kill_step_ = a;
  } else if (std::sscanf(s, "slow:%d:%lld%c", &rank, &a, &tail) == 2 && rank >= 0 && a >= 0) {
    f->slow_rank_ = rank;
    f->slow_ms_ = a;
  } else if (std::sscanf(s, "slow-data:%lld%c", &a, &tail) == 1 && a >= 0) {
    f->slow_data_ms_ = a;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject-fault '", spec,
        "' is not one of kill:RANK@STEP, kill-node:NODE@STEP, nan@STEP, crash-during-save@STEP, "
        "crash-after-save@STEP, enospc@STEP, slow:RANK:MS, slow-data:MS"));
  }
  return f;
}

absl::Status FaultEnv::WriteFileAtomically(const std::string& path, const std::string& contents) {
  // Files of a checkpoint being written lie in its step directory's .tmp.
  const std::filesystem::path p(path);
  const std::string dir = p.parent_path().filename().string();
  const std::string name = p.filename().string();
  if (crash_save_step_ >= 0 && dir == CheckpointStepName(crash_save_step_) + ".tmp" &&
      name == "manifest") {
    std::raise(SIGKILL);
  }
  if (enospc_step_ >= 0 && dir == CheckpointStepName(enospc_step_) + ".tmp" &&
      absl::StartsWith(name, "rank-")) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write '", path, "': No space left on device (injected)"));
  }
  RETURN_IF_ERROR(Env::WriteFileAtomically(path, contents));
  if (crash_after_save_step_ >= 0 && name == "latest" &&
      contents == LatestFileContents(crash_after_save_step_)) {
    std::raise(SIGKILL);
  }
  return absl::OkStatus();
}

absl::Status FaultEnv::AfterGradients(int64_t step, Backend& backend, const Tensor& grads) {
  if (step != nan_step_ || nan_done_) return absl::OkStatus();
  nan_done_ = true;
  const float nan = std::nanf("");
  return backend.CopyFromHost(grads.Slice(0, {1}), &nan);
}

void FaultEnv::LoadingBatch() {
  if (slow_data_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_data_ms_));
}

void FaultEnv::AfterStep(int rank, int64_t step) {
  if (rank == slow_rank_) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
  if (kill_node_ >= 0 && step == kill_step_ + 1 && rank / ranks_per_node_ == kill_node_) {
    std::raise(SIGKILL);
  }
}

void FaultEnv::StepDone(int rank, int64_t step) {
  if (rank == kill_rank_ && step == kill_step_) std::raise(SIGKILL);
  if (kill_node_ >= 0 && step == kill_step_ && rank == kill_node_ * ranks_per_node_) {
    MarkNodeGone();
  }
}

void FaultEnv::MarkNodeGone() const {
  const char* path = std::getenv("LADDER_NODES_FILE");
  if (path == nullptr || *path == 0) return;
  std::ifstream in(path);
  std::string line, kept;
  for (int n = 0; std::getline(in, line); ++n) {
    if (n != kill_node_) kept += line + "\n";
  }
  // Failing to mark it leaves the node listed: the supervisor then restarts
  // on the full layout, which the test notices.
  const absl::Status written = ladder::WriteFileAtomically(path, kept);
  if (!written.ok()) std::fprintf(stderr, "%s\n", std::string(written.message()).c_str());
}

}  // namespace ladder
