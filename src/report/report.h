// `ladder report`: one self-contained HTML page about a training run (inline
// styles and SVG, no scripts, nothing fetched) and a PNG of each plot beside
// it. The page shows the run's summary, loss and validation loss with the
// run's events as markers, tokens/s, MFU, the step's time split, memory by
// category, communication per axis, per-rank step time, the events table and
// GPU telemetry; a plot whose data the run does not have is replaced by a
// one-line note saying what is missing.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/report/run_data.h"

namespace ladder::report {

// The page and its pictures, in memory.
struct RenderedReport {
  std::string html;
  std::vector<std::pair<std::string, std::string>> pngs;  // file name, PNG bytes
};
// Builds the page for `run` (run_data.h). `png_prefix` is the file-name
// prefix of the PNGs the page links to ("report" -> "report-loss.png").
// Fails only if PNG encoding does.
absl::StatusOr<RenderedReport> RenderRunReport(const RunData& run, const std::string& png_prefix);

}  // namespace ladder::report

namespace ladder {

// Reads the run in `run_dir` and writes the report to `out_path` (empty:
// RUN_DIR/report.html) and the PNGs beside it, named after it
// (report-loss.png, report-time.png, ...). Every file is written atomically
// and the page last, so a failure leaves no half-written report. Returns the
// page's path; `warnings` (may be null) receives what was tolerated in the
// input (a torn last line). Errors name the file at fault (run_data.h).
// Any thread may call it; it writes only the files named here.
absl::StatusOr<std::string> WriteRunReport(const std::string& run_dir,
                                           const std::string& out_path = "",
                                           std::vector<std::string>* warnings = nullptr);

}  // namespace ladder
