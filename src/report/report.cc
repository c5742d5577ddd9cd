#include "src/report/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/report/plot.h"
#include "src/report/png.h"
#include "src/report/raster.h"
#include "src/report/svg.h"

namespace ladder::report {
namespace {

constexpr int kPlotWidth = 760, kPlotHeight = 320;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One section of the page: a plot (absent when the run lacks its data) and
// a note under it, or instead of it, saying what it shows or what is missing.
struct Figure {
  Figure(std::string id_, std::string heading_)
      : id(std::move(id_)), heading(std::move(heading_)) {}
  std::string id;  // the PNG's name suffix and the section's anchor
  std::string heading;
  std::optional<Plot> plot;
  std::string note;
  std::string table;  // extra HTML under the plot, may be empty
};

Series MakeSeries(std::string name) {
  Series s;
  s.name = std::move(name);
  return s;
}

Plot MakePlot(Plot::Kind kind, std::string title, std::string x_label, std::string y_label) {
  Plot p;
  p.kind = kind;
  p.title = std::move(title);
  p.x_label = std::move(x_label);
  p.y_label = std::move(y_label);
  return p;
}

std::string Bytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

std::string Fixed(double v, int decimals) {
  return std::isfinite(v) ? absl::StrFormat("%.*f", decimals, v) : std::string("-");
}

std::string UtcTime(double unix_seconds) {
  if (!std::isfinite(unix_seconds)) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The mean of the finite values after the first (the first step includes
// one-time warm-up), or of the only one.
double SteadyMean(const std::vector<double>& values) {
  double sum = 0;
  int n = 0;
  for (size_t i = values.size() > 1 ? 1 : 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) {
      sum += values[i];
      ++n;
    }
  }
  return n ? sum / n : kNaN;
}

// Events worth marking on a plot of steps (not the run's start and end).
std::vector<Marker> EventMarkers(const RunData& run) {
  std::vector<Marker> out;
  for (const RunEvent& e : run.events) {
    if (e.kind == "start" || e.kind == "end") continue;
    Marker m;
    m.x = static_cast<double>(e.step);
    m.kind = e.kind;
    out.push_back(m);
  }
  return out;
}

std::string EventsTable(const RunData& run) {
  if (run.events.empty()) {
    return "<p class=\"note\">No events.jsonl: no checkpoints, restores or restarts were "
           "recorded.</p>\n";
  }
  std::string out =
      "<table><tr><th>time (UTC)</th><th>step</th><th>event</th><th>detail</th></tr>\n";
  for (const RunEvent& e : run.events) {
    absl::StrAppend(&out, "<tr><td>", UtcTime(e.time), "</td><td>", e.step, "</td><td>",
                    EscapeXml(e.kind), "</td><td>", EscapeXml(e.detail), "</td></tr>\n");
  }
  return out + "</table>\n";
}

Figure LossFigure(const RunData& run) {
  Figure f("loss", "Loss");
  f.table = "<h3>Events</h3>\n" + EventsTable(run);
  if (run.steps.empty()) {
    f.note = "No steps in metrics.jsonl: the run stopped before its first step.";
    return f;
  }
  Plot p = MakePlot(Plot::Kind::kLines, "Loss and validation loss", "step", "loss");
  Series train = MakeSeries("loss"), val = MakeSeries("val loss");
  for (const StepRecord& r : run.steps) {
    train.x.push_back(static_cast<double>(r.step));
    train.y.push_back(r.loss);
    if (r.val_loss && std::isfinite(*r.val_loss)) {
      val.x.push_back(static_cast<double>(r.step));
      val.y.push_back(*r.val_loss);
    }
  }
  p.series.push_back(train);
  if (!val.x.empty()) {
    p.series.push_back(val);
  } else {
    f.note = "No validation loss in metrics.jsonl (the run evaluated no held-out data). ";
  }
  p.markers = EventMarkers(run);
  if (!p.markers.empty()) f.note += "Dashed lines: the run's events (table below).";
  f.plot = std::move(p);
  return f;
}

Figure StepSeriesFigure(const RunData& run, std::string id, std::string heading,
                        std::string y_label, double (*value)(const StepRecord&)) {
  Figure f(std::move(id), heading);
  Plot p = MakePlot(Plot::Kind::kLines, heading, "step", std::move(y_label));
  Series s = MakeSeries(heading);
  for (const StepRecord& r : run.steps) {
    s.x.push_back(static_cast<double>(r.step));
    s.y.push_back(value(r));
  }
  p.series.push_back(std::move(s));
  p.markers = EventMarkers(run);
  f.plot = std::move(p);
  return f;
}

// Communication axes in the order the records first name them.
std::vector<std::string> CommAxes(const RunData& run) {
  std::vector<std::string> axes;
  for (const StepRecord& r : run.steps) {
    for (const StepRecord::AxisComm& c : r.comm) {
      if (std::find(axes.begin(), axes.end(), c.axis) == axes.end()) axes.push_back(c.axis);
    }
  }
  return axes;
}

double CommSeconds(const StepRecord& r, const std::string& axis) {
  for (const StepRecord::AxisComm& c : r.comm) {
    if (c.axis == axis) return c.seconds;
  }
  return 0;
}

Figure TimeFigure(const RunData& run) {
  Figure f("time", "Where the step's time went");
  Plot p = MakePlot(Plot::Kind::kStackedArea, "Time split of each step", "step", "seconds");
  struct Layer {
    const char* name;
    double (*value)(const StepRecord&);
  };
  const Layer layers[] = {
      {"data", [](const StepRecord& r) { return r.t_data; }},
      {"forward", [](const StepRecord& r) { return r.t_forward; }},
      {"backward", [](const StepRecord& r) { return r.t_backward; }},
      {"optimizer", [](const StepRecord& r) { return r.t_optimizer; }},
      {"bubble", [](const StepRecord& r) { return r.t_bubble; }},
      {"checkpoint", [](const StepRecord& r) { return r.t_checkpoint; }},
      // What the step's wall time holds beyond the measured phases.
      {"other",
       [](const StepRecord& r) {
         return r.t_step - (r.t_data + r.t_forward + r.t_backward + r.t_optimizer + r.t_bubble);
       }},
  };
  for (const Layer& layer : layers) {
    Series s = MakeSeries(layer.name);
    bool any = false;
    for (const StepRecord& r : run.steps) {
      const double v = layer.value(r);
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(v);
      // Sub-microsecond remainders are rounding, not a phase worth a colour.
      any = any || (std::isfinite(v) && v > 1e-6);
    }
    if (any) p.series.push_back(std::move(s));
  }
  for (const std::string& axis : CommAxes(run)) {
    Series s = MakeSeries("comm: " + axis);
    s.dashed = true;
    for (const StepRecord& r : run.steps) {
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(CommSeconds(r, axis));
    }
    p.overlay.push_back(std::move(s));
  }
  if (p.series.empty()) {
    f.note = "No step times in metrics.jsonl.";
    return f;
  }
  f.note = p.overlay.empty()
               ? "Stacked: each phase's seconds, rank 0."
               : "Stacked: each phase's seconds, rank 0. Dashed lines: seconds inside "
                 "communication calls per parallel axis, which are part of the phases above.";
  f.plot = std::move(p);
  return f;
}

Figure MemoryFigure(const RunData& run) {
  Figure f("memory", "Memory by category");
  struct Row {
    std::string label;
    double weights, grads, optimizer, activations, other;
  };
  std::vector<Row> rows;
  for (const RankInfo& r : run.ranks) {
    const double known = static_cast<double>(r.weights + r.grads + r.optimizer + r.activations);
    rows.push_back(Row{absl::StrCat("rank ", r.rank), static_cast<double>(r.weights),
                       static_cast<double>(r.grads), static_cast<double>(r.optimizer),
                       static_cast<double>(r.activations),
                       std::max(0.0, static_cast<double>(r.allocated) - known)});
  }
  // Without ranks.json: rank 0's figures from the last record that has them.
  for (size_t i = run.steps.size(); rows.empty() && i-- > 0;) {
    const StepRecord::Memory& m = run.steps[i].memory;
    if (m.weights + m.grads + m.optimizer + m.activations > 0) {
      rows.push_back(Row{"rank 0", static_cast<double>(m.weights), static_cast<double>(m.grads),
                         static_cast<double>(m.optimizer), static_cast<double>(m.activations), 0});
    }
  }
  if (rows.empty()) {
    f.note = "No memory figures: neither ranks.json nor a \"memory\" field in metrics.jsonl.";
    return f;
  }
  double most = 0;
  for (const Row& r : rows)
    most = std::max(most, r.weights + r.grads + r.optimizer + r.activations + r.other);
  const bool gib = most >= 1024.0 * 1024 * 1024;
  const double unit = gib ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
  Plot p =
      MakePlot(Plot::Kind::kStackedBars, "Memory by category per rank", "", gib ? "GiB" : "MiB");
  Series w = MakeSeries("weights"), g = MakeSeries("grads"), o = MakeSeries("optimizer"),
         a = MakeSeries("activations"), other = MakeSeries("other allocated");
  bool any_other = false;
  for (const Row& r : rows) {
    p.categories.push_back(r.label);
    w.y.push_back(r.weights / unit);
    g.y.push_back(r.grads / unit);
    o.y.push_back(r.optimizer / unit);
    a.y.push_back(r.activations / unit);
    other.y.push_back(r.other / unit);
    any_other = any_other || r.other > 0;
  }
  p.series = {w, g, o, a};
  if (any_other) p.series.push_back(other);
  f.note = run.ranks.empty() ? "From metrics.jsonl (rank 0)."
                             : "From ranks.json: what each rank held after its first step.";
  f.plot = std::move(p);
  return f;
}

Figure CommFigure(const RunData& run) {
  Figure f("comm", "Communication per parallel axis");
  const std::vector<std::string> axes = CommAxes(run);
  if (axes.empty()) {
    f.note = "No communication in metrics.jsonl (a single-rank run).";
    return f;
  }
  Plot p = MakePlot(Plot::Kind::kLines, "Communication share of step time", "step", "% of step");
  double total_step = 0;
  for (const StepRecord& r : run.steps) {
    if (std::isfinite(r.t_step)) total_step += r.t_step;
  }
  f.table =
      "<table><tr><th>axis</th><th>seconds</th><th>share of step time</th>"
      "<th>bytes</th><th>bytes per step</th></tr>\n";
  for (const std::string& axis : axes) {
    Series s = MakeSeries(axis);
    double seconds = 0, bytes = 0;
    for (const StepRecord& r : run.steps) {
      s.x.push_back(static_cast<double>(r.step));
      const double sec = CommSeconds(r, axis);
      s.y.push_back(r.t_step > 0 ? 100 * sec / r.t_step : kNaN);
      if (std::isfinite(sec)) seconds += sec;
      for (const StepRecord::AxisComm& c : r.comm) {
        if (c.axis == axis) bytes += static_cast<double>(c.bytes);
      }
    }
    p.series.push_back(std::move(s));
    absl::StrAppend(&f.table, "<tr><td>", EscapeXml(axis), "</td><td>", Fixed(seconds, 3),
                    "</td><td>", total_step > 0 ? Fixed(100 * seconds / total_step, 1) + "%" : "-",
                    "</td><td>", Bytes(bytes), "</td><td>",
                    Bytes(bytes / static_cast<double>(run.steps.size())), "</td></tr>\n");
  }
  f.table += "</table>\n";
  f.note = "Rank 0's seconds inside communication calls over its step time, per axis.";
  f.plot = std::move(p);
  return f;
}

Figure RanksFigure(const RunData& run) {
  Figure f("ranks", "Per-rank step time");
  Plot p = MakePlot(Plot::Kind::kHeatmap, "Compute seconds per rank and step", "step", "");
  size_t ranks = 0;
  for (const StepRecord& r : run.steps) ranks = std::max(ranks, r.rank_seconds.size());
  if (ranks == 0) {
    f.note = "No per-rank step times (\"rank_seconds\") in metrics.jsonl.";
    return f;
  }
  p.cells.assign(ranks, {});
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const std::vector<double>& rs = run.steps[i].rank_seconds;
    if (rs.empty()) continue;
    p.x_values.push_back(static_cast<double>(run.steps[i].step));
    for (size_t r = 0; r < ranks; ++r) p.cells[r].push_back(r < rs.size() ? rs[r] : kNaN);
  }
  for (size_t r = 0; r < ranks; ++r) p.row_labels.push_back(absl::StrCat("rank ", r));
  f.note = "Each cell: one rank's compute seconds in one step (darker is slower).";
  f.plot = std::move(p);
  return f;
}

Figure GpuFigure(const RunData& run, std::string id, std::string heading, std::string y_label,
                 double (*value)(const GpuSample&)) {
  Figure f(std::move(id), heading);
  if (run.gpu.empty()) {
    f.note = "No gpu.jsonl (no GPU telemetry: a CPU run, or NVML was not found).";
    return f;
  }
  double t0 = run.gpu.front().time;
  int gpus = 0;
  for (const GpuSample& s : run.gpu) {
    t0 = std::min(t0, s.time);
    gpus = std::max(gpus, s.gpu + 1);
  }
  Plot p =
      MakePlot(Plot::Kind::kLines, heading, "seconds since the first sample", std::move(y_label));
  for (int g = 0; g < gpus; ++g) {
    Series s = MakeSeries(absl::StrCat("gpu ", g));
    for (const GpuSample& sample : run.gpu) {
      if (sample.gpu != g) continue;
      s.x.push_back(sample.time - t0);
      s.y.push_back(value(sample));
    }
    if (!s.x.empty()) p.series.push_back(std::move(s));
  }
  f.plot = std::move(p);
  return f;
}

// "dp2 · tp2 · pp2 (8 ranks)" from ranks.json's grid coordinates.
std::string Layout(const RunData& run) {
  if (run.ranks.empty()) return "";
  int dp = 0, tp = 0, pp = 0;
  for (const RankInfo& r : run.ranks) {
    dp = std::max(dp, r.dp + 1);
    tp = std::max(tp, r.tp + 1);
    pp = std::max(pp, r.pp + 1);
  }
  return absl::StrFormat("dp%d &middot; tp%d &middot; pp%d (%d ranks)", dp, tp, pp,
                         static_cast<int>(run.ranks.size()));
}

std::string Summary(const RunData& run) {
  std::string out = "<table class=\"summary\">\n";
  auto row = [&out](const char* key, const std::string& value) {
    absl::StrAppend(&out, "<tr><th>", key, "</th><td>", value, "</td></tr>\n");
  };
  row("run directory", EscapeXml(run.dir));
  if (run.steps.empty()) {
    row("steps", "none recorded (the run stopped before its first step)");
  } else {
    std::vector<double> tokens, mfu;
    double seconds = 0, best_val = kNaN;
    int64_t best_val_step = 0;
    for (const StepRecord& r : run.steps) {
      tokens.push_back(r.tokens_per_s);
      mfu.push_back(r.mfu);
      if (std::isfinite(r.t_step)) seconds += r.t_step;
      if (std::isfinite(r.t_checkpoint)) seconds += r.t_checkpoint;
      if (r.val_loss && std::isfinite(*r.val_loss) && !(*r.val_loss >= best_val)) {
        best_val = *r.val_loss;
        best_val_step = r.step;
      }
    }
    row("steps", absl::StrCat(run.steps.size(), " recorded, last step ", run.steps.back().step));
    row("final loss", Fixed(run.steps.back().loss, 4));
    row("best validation loss", std::isfinite(best_val)
                                    ? absl::StrCat(Fixed(best_val, 4), " at step ", best_val_step)
                                    : std::string("-"));
    row("mean tokens/s (after step 1)", Fixed(SteadyMean(tokens), 0));
    row("mean MFU (after step 1)", Fixed(100 * SteadyMean(mfu), 2) + "%");
    row("time in steps", Fixed(seconds, 2) + " s");
  }
  const std::string layout = Layout(run);
  if (!layout.empty()) row("layout", layout);
  if (!run.gpu.empty()) {
    int gpus = 0;
    for (const GpuSample& s : run.gpu) gpus = std::max(gpus, s.gpu + 1);
    row("GPUs sampled", absl::StrCat(gpus, " (", run.gpu.size(), " samples)"));
  }
  return out + "</table>\n";
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 800px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
svg { width: 100%; height: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; }
table.summary th { background: #f4f4f4; }
.note { color: #555; font-size: 0.9em; }
.warning { color: #a40; }
)";

}  // namespace

absl::StatusOr<RenderedReport> RenderRunReport(const RunData& run, const std::string& png_prefix) {
  std::vector<Figure> figures;
  figures.push_back(LossFigure(run));
  if (!run.steps.empty()) {
    figures.push_back(StepSeriesFigure(run, "tokens", "Throughput", "tokens/s",
                                       [](const StepRecord& r) { return r.tokens_per_s; }));
    figures.push_back(StepSeriesFigure(run, "mfu", "Model FLOPs utilization", "MFU %",
                                       [](const StepRecord& r) { return 100 * r.mfu; }));
    figures.push_back(TimeFigure(run));
    figures.push_back(MemoryFigure(run));
    figures.push_back(CommFigure(run));
    figures.push_back(RanksFigure(run));
  }
  figures.push_back(GpuFigure(run, "gpu-util", "GPU utilization", "%",
                              [](const GpuSample& s) { return s.util; }));
  figures.push_back(GpuFigure(run, "gpu-memory", "GPU memory used", "GiB", [](const GpuSample& s) {
    return static_cast<double>(s.mem_used) / (1024.0 * 1024 * 1024);
  }));
  figures.push_back(GpuFigure(run, "gpu-power", "GPU power", "watts",
                              [](const GpuSample& s) { return s.power_w; }));

  RenderedReport out;
  std::string& html = out.html;
  absl::StrAppend(&html,
                  "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<link rel=\"icon\" href=\"data:,\">\n<title>ladder run report: ",
                  EscapeXml(run.dir), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n",
                  "<h1>ladder run report</h1>\n", Summary(run));
  for (const std::string& w : run.warnings) {
    absl::StrAppend(&html, "<p class=\"warning\">warning: ", EscapeXml(w), "</p>\n");
  }
  for (Figure& f : figures) {
    absl::StrAppend(&html, "<section id=\"", f.id, "\">\n<h2>", EscapeXml(f.heading), "</h2>\n");
    if (f.plot && !HasData(*f.plot)) {
      f.note = "Nothing to plot: every value is missing or not finite.";
      f.plot.reset();
    }
    if (f.plot) {
      const Scene scene = LayoutPlot(*f.plot, kPlotWidth, kPlotHeight);
      const std::string name = absl::StrCat(png_prefix, "-", f.id, ".png");
      ASSIGN_OR_RETURN(std::string png, EncodePng(Rasterize(scene)));
      out.pngs.emplace_back(name, std::move(png));
      absl::StrAppend(&html, RenderSvg(scene, f.plot->title), "\n");
      absl::StrAppend(&html, "<p class=\"note\">", EscapeXml(f.note), " <a href=\"",
                      EscapeXml(name), "\">PNG</a></p>\n");
    } else {
      absl::StrAppend(&html, "<p class=\"note\">", EscapeXml(f.note), "</p>\n");
    }
    html += f.table;
    html += "</section>\n";
  }
  html += "</body>\n</html>\n";
  return out;
}

}  // namespace ladder::report

namespace ladder {

absl::StatusOr<std::string> WriteRunReport(const std::string& run_dir, const std::string& out_path,
                                           std::vector<std::string>* warnings) {
  const std::string path =
      out_path.empty() ? (std::filesystem::path(run_dir) / "report.html").string() : out_path;
  ASSIGN_OR_RETURN(const report::RunData run, report::ReadRunData(run_dir));
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  if (!std::filesystem::is_directory(dir)) {
    return absl::NotFoundError(
        absl::StrCat("the report's directory '", dir.string(), "' does not exist"));
  }
  if (std::filesystem::is_directory(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is a directory: --out names the HTML file to write"));
  }
  ASSIGN_OR_RETURN(report::RenderedReport rendered,
                   report::RenderRunReport(run, p.stem().string()));
  // All staged before any is renamed, the pictures first and the page last:
  // a page on disk always has its PNGs, and a failed write leaves none.
  std::vector<std::pair<std::string, std::string>> files;
  for (auto& [name, bytes] : rendered.pngs)
    files.emplace_back((dir / name).string(), std::move(bytes));
  files.emplace_back(path, std::move(rendered.html));
  RETURN_IF_ERROR(WriteFilesAtomically(files));
  if (warnings != nullptr) {
    warnings->insert(warnings->end(), run.warnings.begin(), run.warnings.end());
  }
  return path;
}

}  // namespace ladder
