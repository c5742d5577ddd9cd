#include "src/train/metrics.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ladder {
namespace {

// JSON has no NaN/Infinity: a non-finite value is written as null.
std::string Num(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.9g", v) : std::string("null");
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

std::string StepRecord::ToJson() const {
  std::string out = absl::StrCat(
      "{\"step\":", step, ",\"loss\":", Num(loss), ",\"lr\":", Num(lr),
      ",\"grad_norm\":", Num(grad_norm), ",\"tokens_per_s\":", Num(tokens_per_s),
      ",\"mfu\":", Num(mfu), ",\"time_s\":{\"data\":", Num(t_data), ",\"forward\":", Num(t_forward),
      ",\"backward\":", Num(t_backward), ",\"optimizer\":", Num(t_optimizer),
      ",\"bubble\":", Num(t_bubble), ",\"grad_overlapped\":", Num(t_grad_overlapped),
      ",\"grad_exposed\":", Num(t_grad_exposed), ",\"checkpoint\":", Num(t_checkpoint),
      ",\"step\":", Num(t_step), "}");
  if (!comm.empty()) {
    absl::StrAppend(&out, ",\"comm\":{");
    for (size_t i = 0; i < comm.size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", "\"", comm[i].axis,
                      "\":{\"seconds\":", Num(comm[i].seconds), ",\"bytes\":", comm[i].bytes, "}");
    }
    out += "}";
  }
  absl::StrAppend(&out, ",\"memory\":{\"weights\":", memory.weights, ",\"grads\":", memory.grads,
                  ",\"optimizer\":", memory.optimizer, ",\"activations\":", memory.activations,
                  memory.host > 0 ? absl::StrCat(",\"host\":", memory.host) : std::string(), "}");
  if (link.to_host > 0 || link.to_device > 0) {
    absl::StrAppend(&out, ",\"link\":{\"to_host\":", link.to_host,
                    ",\"to_device\":", link.to_device, ",\"seconds\":", Num(link.seconds), "}");
  }
  if (!rank_seconds.empty()) {
    out += ",\"rank_seconds\":[";
    for (size_t q = 0; q < rank_seconds.size(); ++q) {
      absl::StrAppend(&out, q ? "," : "", Num(rank_seconds[q]));
    }
    out += "]";
  }
  if (straggler) {
    absl::StrAppend(&out, ",\"straggler\":{\"rank\":", straggler->rank,
                    ",\"ratio\":", Num(straggler->ratio),
                    ",\"wait_share\":", Num(straggler->wait_share), "}");
  }
  if (skipped) out += ",\"skipped\":true";
  if (val_loss) absl::StrAppend(&out, ",\"val_loss\":", Num(*val_loss));
  out += "}";
  return out;
}

std::string StepRecord::ProgressLine(int64_t total_steps, double eta_seconds) const {
  std::string line =
      absl::StrFormat("step %d/%d | loss %.4f | lr %.2e | %.1fk tok/s | MFU %.1f%%", step,
                      total_steps, loss, lr, tokens_per_s / 1000.0, 100.0 * mfu);
  if (val_loss) absl::StrAppendFormat(&line, " | val %.4f", *val_loss);
  if (skipped) line += " | update skipped";
  if (straggler) absl::StrAppend(&line, " | straggler ", straggler->Describe());
  absl::StrAppend(&line, " | ETA ", Duration(eta_seconds));
  return line;
}

std::string StepRecord::Straggler::Describe() const {
  return absl::StrFormat("rank %d: %.1fx median, waiting cost %.0f%% of the step", rank, ratio,
                         100.0 * wait_share);
}

absl::StatusOr<MetricsWriter> MetricsWriter::Open(const std::string& path, int64_t keep_through) {
  std::string kept;
  if (keep_through >= 0) {
    std::ifstream in(path);
    std::string line;
    int64_t step = 0;
    while (std::getline(in, line)) {
      // Every record starts {"step":N,
      if (std::sscanf(line.c_str(), "{\"step\":%ld,", &step) == 1 && step <= keep_through) {
        kept += line + "\n";
      }
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot create '", path, "'"));
  if (!kept.empty() && (std::fputs(kept.c_str(), f) < 0 || std::fflush(f) != 0)) {
    std::fclose(f);
    return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  return MetricsWriter(f);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsWriter::Write(const StepRecord& r) {
  const std::string line = r.ToJson() + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    return absl::InternalError("cannot write metrics line");
  }
  return absl::OkStatus();
}

}  // namespace ladder
