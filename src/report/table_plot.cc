#include "src/report/table_plot.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ladder::report {
namespace {

// The cell's number, NaN for a gap; false if it is neither.
bool ParseCell(const std::string& cell, double* out) {
  const std::string text(absl::StripAsciiWhitespace(cell));
  if (text == "nan" || text == "-" || text == "NaN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

absl::StatusOr<int> Column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("the table has no column '", name,
                                                 "' (columns: ", absl::StrJoin(header, ", "), ")"));
}

// log2 of v on a log axis; false for a value that has none.
bool Scale(bool log, double* v) {
  if (!log || std::isnan(*v)) return true;
  if (*v <= 0) return false;
  *v = std::log2(*v);
  return true;
}

}  // namespace

absl::StatusOr<Plot> TablePlot(const std::string& tsv, const TablePlotSpec& spec) {
  std::vector<std::string> lines = absl::StrSplit(tsv, '\n', absl::SkipWhitespace());
  if (lines.empty()) return absl::InvalidArgumentError("the table is empty: no header line");
  const std::vector<std::string> header = absl::StrSplit(lines[0], '\t');
  if (spec.y.empty()) return absl::InvalidArgumentError("no y column to plot");
  const absl::StatusOr<int> x_col = Column(header, spec.x);
  if (!x_col.ok()) return x_col.status();
  Plot plot;
  plot.kind = Plot::Kind::kLines;
  plot.title = spec.title;
  plot.x_label = spec.log_x ? absl::StrCat("log2 ", spec.x_label) : spec.x_label;
  plot.y_label = spec.log_y ? absl::StrCat("log2 ", spec.y_label) : spec.y_label;
  std::vector<int> y_cols;
  for (const std::string& name : spec.y) {
    const absl::StatusOr<int> c = Column(header, name);
    if (!c.ok()) return c.status();
    y_cols.push_back(*c);
    plot.series.push_back(Series{name, {}, {}, false});
  }
  for (size_t r = 1; r < lines.size(); ++r) {
    const std::vector<std::string> cells = absl::StrSplit(lines[r], '\t');
    if (cells.size() != header.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, " has ", cells.size(), " cells, the header ", header.size()));
    }
    // Only the plotted columns need numbers (others may hold names).
    std::vector<double> v(cells.size());
    std::vector<int> used = y_cols;
    used.push_back(*x_col);
    for (const int c : used) {
      if (!ParseCell(cells[c], &v[c])) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, ", column '", header[c], "': '",
                                                       cells[c], "' is not a number"));
      }
    }
    double x = v[*x_col];
    if (!Scale(spec.log_x, &x)) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, ": x = ", cells[*x_col], " has no logarithm"));
    }
    for (size_t k = 0; k < y_cols.size(); ++k) {
      double y = v[y_cols[k]];
      if (!Scale(spec.log_y, &y)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row ", r, ", column '", spec.y[k], "': ", cells[y_cols[k]], " has no logarithm"));
      }
      plot.series[k].x.push_back(x);
      plot.series[k].y.push_back(y);
    }
  }
  return plot;
}

}  // namespace ladder::report
