#include "src/train/env.h"

#include "src/core/file_util.h"

namespace ladder {

Env* Env::Default() {
  static Env* env = new Env();
  return env;
}

absl::Status Env::WriteFileAtomically(const std::string& path, const std::string& contents) {
  return ::ladder::WriteFileAtomically(path, contents);
}

absl::Status Env::AfterGradients(int64_t, Backend&, const Tensor&) { return absl::OkStatus(); }

void Env::LoadingBatch() {}

void Env::AfterStep(int, int64_t) {}

void Env::StepDone(int, int64_t) {}

}  // namespace ladder
