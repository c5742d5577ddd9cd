// The run's policy under faults a test injects through its own Env
// (src/train/env.h): a full disk during one checkpoint, a NaN gradient that
// forces a rollback. Each asserts what recovery must guarantee: the run goes
// on, the previous checkpoint stays the latest, and a rolled-back run ends
// bitwise where the run without the fault ends.
#include "src/train/run.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/file_util.h"
#include "src/parallel/self_comm.h"
#include "tests/train/small_run.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;

// Fails every checkpoint write into step `full_step`'s directory, turns the
// gradient of `nan_step` into NaN once, and records the step hooks.
class ScriptedEnv : public Env {
 public:
  int64_t full_step = -1, nan_step = -1;
  std::vector<int64_t> after_step, step_done;
  std::atomic<int> failed_writes{0};

  absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) override {
    if (absl::StrContains(path, CheckpointStepName(full_step) + ".tmp/")) {
      ++failed_writes;
      return absl::ResourceExhaustedError(absl::StrCat("cannot write '", path, "': disk full"));
    }
    return Env::WriteFileAtomically(path, contents);
  }
  absl::Status AfterGradients(int64_t step, Backend& backend, const Tensor& grads) override {
    if (step != nan_step) return absl::OkStatus();
    nan_step = -1;
    const float nan = std::nanf("");
    return backend.CopyFromHost(grads.Slice(0, {1}), &nan);
  }
  void AfterStep(int, int64_t step) override { after_step.push_back(step); }
  void StepDone(int, int64_t step) override { step_done.push_back(step); }
};

struct Outcome {
  std::vector<float> weights;
  std::vector<nlohmann::json> events, metrics;
};

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << path;
  if (!text.ok()) return out;
  size_t at = 0;
  for (size_t nl; (nl = text->find('\n', at)) != std::string::npos; at = nl + 1) {
    out.push_back(nlohmann::json::parse(text->substr(at, nl - at)));
  }
  return out;
}

// One process: a fresh run directory, `policy` with its out set, `env`.
Outcome Train(const std::string& out, RunPolicy policy, Env* env, int max_bad_steps = 3) {
  RunConfig rc = SmallRun();
  rc.eval_every = 0;
  rc.eval_batches = 1;
  rc.log_every = 100;
  const std::vector<int32_t> data = RandomTokens(4000, 7);
  CpuBackend backend;
  TrainerOptions options;
  options.env = env;
  options.guard.max_bad_steps = max_bad_steps;
  auto trainer = *Trainer::Create(rc, &backend, &data, &data, 0, options);
  const Grid grid = *Grid::Create(GridShape(), 1, 0);
  SelfCommunicator world(Axis::kWorld, 0);
  fs::remove_all(out);
  fs::create_directories(out);
  policy.out = out;
  RunParts parts;
  parts.trainer = trainer.get();
  parts.backend = &backend;
  parts.grid = &grid;
  parts.world = &world;
  parts.env = env;
  TrainingRun run(policy, parts);
  EXPECT_FALSE(run.resuming());
  const absl::Status ran = run.Run();
  EXPECT_TRUE(ran.ok()) << ran;
  Outcome o;
  o.weights.resize(trainer->model().table().total_floats());
  EXPECT_TRUE(trainer->model().GetWeights(o.weights.data()).ok());
  o.events = ReadJsonLines(out + "/events.jsonl");
  o.metrics = ReadJsonLines(out + "/metrics.jsonl");
  return o;
}

std::string TestDir(const std::string& name) {
  return (fs::temp_directory_path() / absl::StrCat("ladder_run_test_", name)).string();
}

TEST(TrainingRunTest, AFullDiskLosesOneCheckpointAndNothingElse) {
  ScriptedEnv env;
  env.full_step = 4;
  RunPolicy policy;
  policy.save_every = 2;
  policy.keep = 5;
  const std::string out = TestDir("full");
  Outcome o = Train(out, policy, &env);
  EXPECT_GT(env.failed_writes.load(), 0);
  // Steps 2 and 6 committed, 4 never did and left no .tmp behind.
  EXPECT_TRUE(fs::exists(out + "/checkpoints/" + CheckpointStepName(2)));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/" + CheckpointStepName(4)));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/" + CheckpointStepName(4) + ".tmp"));
  EXPECT_EQ(*ReadFile(out + "/checkpoints/latest"), CheckpointStepName(6) + "\n");
  EXPECT_EQ(o.metrics.size(), 6u);
  // The hooks saw every step once, in order.
  const std::vector<int64_t> steps = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(env.after_step, steps);
  EXPECT_EQ(env.step_done, steps);
  // The events tell the story: start, save 2, a failed save at 4, save 6, end.
  std::vector<std::string> story;
  for (const nlohmann::json& e : o.events) {
    story.push_back(absl::StrCat(e["kind"].get<std::string>(), "@", e["step"].get<int64_t>()));
  }
  EXPECT_EQ(story, (std::vector<std::string>{"start@0", "save@2", "save@4", "save@6", "end@6"}));
  EXPECT_TRUE(absl::StartsWith(o.events[2]["detail"].get<std::string>(), "failed: "));
  EXPECT_TRUE(absl::StrContains(o.events[2]["detail"].get<std::string>(), "disk full"));
}

TEST(TrainingRunTest, ARollbackAfterANanEndsBitwiseWhereTheCleanRunEnds) {
  RunPolicy policy;
  policy.save_every = 2;
  Env clean_env;
  const Outcome clean = Train(TestDir("clean"), policy, &clean_env, 1);
  ScriptedEnv env;
  env.nan_step = 5;
  const Outcome faulty = Train(TestDir("nan"), policy, &env, 1);
  // Step 5 ran twice: once with the NaN (skipped, rolled back to step 4),
  // once clean.
  EXPECT_EQ(env.after_step, (std::vector<int64_t>{1, 2, 3, 4, 5, 5, 6}));
  EXPECT_EQ(faulty.weights, clean.weights);
  bool rolled_back = false;
  for (const nlohmann::json& e : faulty.events) {
    if (e["kind"] == "rollback") {
      rolled_back = true;
      EXPECT_EQ(e["step"], 4);
    }
  }
  EXPECT_TRUE(rolled_back);
  ASSERT_EQ(faulty.metrics.size(), clean.metrics.size());
  for (size_t i = 0; i < clean.metrics.size(); ++i) {
    EXPECT_EQ(faulty.metrics[i]["loss"], clean.metrics[i]["loss"]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace ladder
