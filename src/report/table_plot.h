// A table drawn as lines: what the teaching experiments plot
// (scripts/experiments/, through `ladder plot`). The table is tab-separated
// text: a header line of column names, then one line per row; the plotted
// columns hold numbers (a cell "nan" or "-" is a gap in its line), the
// others anything.
//
// Pure function; any thread may call it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/report/plot.h"

namespace ladder::report {

struct TablePlotSpec {
  std::string x;               // the x column
  std::vector<std::string> y;  // one line per column
  std::string title, x_label, y_label;
  // Plot log2 of x (or of y): for sizes that double (T = 128 ... 4096). The
  // axis label says so.
  bool log_x = false, log_y = false;
};

// The plot of `tsv` by `spec`. InvalidArgument naming the problem: no
// header, a column named in spec that the header lacks, a row with another
// number of cells, a cell that is not a number (its row and column), a
// value that cannot take the log (zero or negative) on a log axis.
absl::StatusOr<Plot> TablePlot(const std::string& tsv, const TablePlotSpec& spec);

}  // namespace ladder::report
