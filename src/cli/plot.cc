// ladder plot: a tab-separated table drawn as lines into a PNG, with the
// renderer of `ladder report` (src/report/table_plot.h). The teaching
// experiments (scripts/experiments/) plot their tables with it, so they need
// no plotting package.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/cli/commands.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/report/png.h"
#include "src/report/raster.h"
#include "src/report/table_plot.h"

namespace ladder {

int PlotCommand(int argc, char** argv) {
  std::string table, out, y;
  int64_t width = 800, height = 450;
  report::TablePlotSpec spec;
  FlagSet flags("ladder plot",
                "Draw columns of a tab-separated table (a header line, then rows of numbers) as "
                "lines against one column, into a PNG.");
  flags.String("table", &table, "the table file (required)");
  flags.String("x", &spec.x, "the x column (required)");
  flags.String("y", &y, "the y columns, comma separated: one line each (required)");
  flags.String("out", &out, "the PNG file to write (required)");
  flags.String("title", &spec.title, "the plot's title");
  flags.String("x-label", &spec.x_label, "the x axis label");
  flags.String("y-label", &spec.y_label, "the y axis label");
  flags.Bool("log-x", &spec.log_x, "plot log2 of x");
  flags.Bool("log-y", &spec.log_y, "plot log2 of y");
  flags.Int("width", &width, "pixels");
  flags.Int("height", &height, "pixels");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (table.empty() || spec.x.empty() || y.empty() || out.empty()) {
      return absl::InvalidArgumentError("--table, --x, --y and --out are required");
    }
    if (width < 200 || height < 150 || width > 4000 || height > 4000) {
      return absl::InvalidArgumentError("--width and --height must be within 200x150 .. 4000x4000");
    }
    spec.y = absl::StrSplit(y, ',', absl::SkipEmpty());
    std::ifstream in(table);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the table '", table, "'"));
    std::stringstream text;
    text << in.rdbuf();
    ASSIGN_OR_RETURN(const report::Plot plot, report::TablePlot(text.str(), spec));
    const report::Scene scene =
        report::LayoutPlot(plot, static_cast<int>(width), static_cast<int>(height));
    ASSIGN_OR_RETURN(const std::string png, report::EncodePng(report::Rasterize(scene)));
    RETURN_IF_ERROR(WriteFileAtomically(out, png));
    std::printf("plot: %s\n", out.c_str());
    return absl::OkStatus();
  });
}

}  // namespace ladder
