#include "src/report/run_data.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/core/file_util.h"
#include "src/core/status.h"

namespace ladder::report {
namespace {

using nlohmann::json;

// A numeric field, or NaN where it is missing or null (metrics.jsonl writes
// non-finite numbers as null).
double Num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}

int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

// The JSON objects of a .jsonl file, one a line (blank lines skipped), with
// the line number of each for error messages.
struct Line {
  int number;
  json value;
};
absl::StatusOr<std::vector<Line>> ReadJsonLines(const std::string& path,
                                                std::vector<std::string>* warnings) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  std::vector<Line> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const int number = static_cast<int>(i) + 1;
    // The piece after the last '\n' is a line the writer never finished.
    const bool unfinished = i + 1 == lines.size();
    json value = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object()) {
      if (unfinished) {
        warnings->push_back(absl::StrCat(path, ":", number,
                                         ": last line is cut short (the run stopped mid-write); "
                                         "read the ",
                                         out.size(), " lines before it"));
        break;
      }
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": not a JSON object: '",
                       line.size() > 60 ? line.substr(0, 60) + "..." : line, "'"));
    }
    out.push_back(Line{number, std::move(value)});
  }
  return out;
}

absl::Status NeedNumber(const std::string& path, const Line& line, const char* key) {
  auto it = line.value.find(key);
  if (it == line.value.end() || !(it->is_number() || it->is_null())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line.number, ": no number \"", key, "\""));
  }
  return absl::OkStatus();
}

absl::Status ReadMetrics(const std::string& path, RunData* run) {
  ASSIGN_OR_RETURN(const std::vector<Line> lines, ReadJsonLines(path, &run->warnings));
  for (const Line& line : lines) {
    const json& j = line.value;
    RETURN_IF_ERROR(NeedNumber(path, line, "step"));
    RETURN_IF_ERROR(NeedNumber(path, line, "loss"));
    StepRecord r;
    r.step = Int(j, "step");
    r.loss = Num(j, "loss");
    r.lr = Num(j, "lr");
    r.grad_norm = Num(j, "grad_norm");
    r.tokens_per_s = Num(j, "tokens_per_s");
    r.mfu = Num(j, "mfu");
    if (auto t = j.find("time_s"); t != j.end() && t->is_object()) {
      r.t_data = Num(*t, "data");
      r.t_forward = Num(*t, "forward");
      r.t_backward = Num(*t, "backward");
      r.t_optimizer = Num(*t, "optimizer");
      r.t_bubble = Num(*t, "bubble");
      r.t_grad_overlapped = Num(*t, "grad_overlapped");
      r.t_grad_exposed = Num(*t, "grad_exposed");
      r.t_checkpoint = Num(*t, "checkpoint");
      r.t_step = Num(*t, "step");
    }
    if (auto c = j.find("comm"); c != j.end() && c->is_object()) {
      for (auto it = c->begin(); it != c->end(); ++it) {
        StepRecord::AxisComm axis;
        axis.axis = it.key();
        axis.seconds = Num(it.value(), "seconds");
        axis.bytes = Int(it.value(), "bytes");
        r.comm.push_back(axis);
      }
    }
    if (auto m = j.find("memory"); m != j.end() && m->is_object()) {
      r.memory.weights = Int(*m, "weights");
      r.memory.grads = Int(*m, "grads");
      r.memory.optimizer = Int(*m, "optimizer");
      r.memory.activations = Int(*m, "activations");
    }
    r.skipped = j.value("skipped", false);
    if (auto v = j.find("val_loss"); v != j.end()) r.val_loss = Num(j, "val_loss");
    if (auto rs = j.find("rank_seconds"); rs != j.end() && rs->is_array()) {
      for (const json& v : *rs) {
        r.rank_seconds.push_back(v.is_number() ? v.get<double>()
                                               : std::numeric_limits<double>::quiet_NaN());
      }
    }
    run->steps.push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status ReadEvents(const std::string& path, RunData* run) {
  ASSIGN_OR_RETURN(const std::vector<Line> lines, ReadJsonLines(path, &run->warnings));
  for (const Line& line : lines) {
    auto kind = line.value.find("kind");
    if (kind == line.value.end() || !kind->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line.number, ": no string \"kind\""));
    }
    RunEvent e;
    e.time = Num(line.value, "time");
    e.step = Int(line.value, "step");
    e.kind = kind->get<std::string>();
    auto detail = line.value.find("detail");
    if (detail != line.value.end() && detail->is_string()) e.detail = detail->get<std::string>();
    run->events.push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status ReadGpu(const std::string& path, RunData* run) {
  ASSIGN_OR_RETURN(const std::vector<Line> lines, ReadJsonLines(path, &run->warnings));
  for (const Line& line : lines) {
    RETURN_IF_ERROR(NeedNumber(path, line, "time"));
    RETURN_IF_ERROR(NeedNumber(path, line, "gpu"));
    GpuSample s;
    s.time = Num(line.value, "time");
    s.gpu = static_cast<int>(Int(line.value, "gpu"));
    s.util = Num(line.value, "util");
    s.mem_used = Int(line.value, "mem_used");
    s.mem_total = Int(line.value, "mem_total");
    s.power_w = Num(line.value, "power_w");
    run->gpu.push_back(s);
  }
  return absl::OkStatus();
}

absl::Status ReadRanks(const std::string& path, RunData* run) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON array of ranks"));
  }
  for (const json& r : j) {
    if (!r.is_object() || !r.contains("rank")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": an entry has no \"rank\""));
    }
    RankInfo info;
    info.rank = static_cast<int>(Int(r, "rank"));
    info.pp = static_cast<int>(Int(r, "pp"));
    info.dp = static_cast<int>(Int(r, "dp"));
    info.tp = static_cast<int>(Int(r, "tp"));
    if (auto m = r.find("memory"); m != r.end() && m->is_object()) {
      info.weights = Int(*m, "weights");
      info.grads = Int(*m, "grads");
      info.optimizer = Int(*m, "optimizer");
      info.activations = Int(*m, "activations");
      info.allocated = Int(*m, "allocated");
    }
    if (auto c = r.find("comm_bytes"); c != r.end() && c->is_object()) {
      for (auto it = c->begin(); it != c->end(); ++it) {
        if (it.value().is_number()) info.comm_bytes[it.key()] = it.value().get<int64_t>();
      }
    }
    run->ranks.push_back(std::move(info));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunData> ReadRunData(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("run directory '", dir, "' does not exist"));
  }
  RunData run;
  run.dir = dir;
  const std::string metrics = dir + "/metrics.jsonl";
  if (!fs::exists(metrics)) {
    return absl::NotFoundError(
        absl::StrCat("'", metrics, "' does not exist (not a ladder train output directory?)"));
  }
  RETURN_IF_ERROR(ReadMetrics(metrics, &run));
  if (fs::exists(dir + "/events.jsonl")) RETURN_IF_ERROR(ReadEvents(dir + "/events.jsonl", &run));
  if (fs::exists(dir + "/ranks.json")) RETURN_IF_ERROR(ReadRanks(dir + "/ranks.json", &run));
  if (fs::exists(dir + "/gpu.jsonl")) RETURN_IF_ERROR(ReadGpu(dir + "/gpu.jsonl", &run));
  return run;
}

}  // namespace ladder::report
