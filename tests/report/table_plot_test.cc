// TablePlot: the experiments' tables as lines, with gaps, log axes and the
// errors it names.
#include "src/report/table_plot.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ladder::report {
namespace {

constexpr char kTable[] = "T\tnaive\tflash\n128\t1.5\t1\n256\tnan\t2\n512\t24\t4\n";

TEST(TablePlotTest, OneLinePerColumnWithGaps) {
  TablePlotSpec spec{"T", {"naive", "flash"}, "memory", "tokens", "MiB", false, false};
  absl::StatusOr<Plot> p = TablePlot(kTable, spec);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->series.size(), 2u);
  EXPECT_EQ(p->series[0].name, "naive");
  EXPECT_EQ(p->series[0].x, (std::vector<double>{128, 256, 512}));
  EXPECT_EQ(p->series[0].y[0], 1.5);
  EXPECT_TRUE(std::isnan(p->series[0].y[1]));
  EXPECT_EQ(p->series[1].y, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(p->title, "memory");
  EXPECT_TRUE(HasData(*p));
}

TEST(TablePlotTest, LogAxesTakeLog2) {
  TablePlotSpec spec{"T", {"flash"}, "", "tokens", "MiB", true, true};
  absl::StatusOr<Plot> p = TablePlot(kTable, spec);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->series[0].x, (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(p->series[0].y, (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(p->x_label, "log2 tokens");
}

TEST(TablePlotTest, ErrorsNameTheProblem) {
  auto error = [](const std::string& tsv, TablePlotSpec spec) {
    absl::StatusOr<Plot> p = TablePlot(tsv, spec);
    EXPECT_FALSE(p.ok());
    return std::string(p.status().message());
  };
  TablePlotSpec spec{"T", {"flash"}, "", "", "", false, false};
  EXPECT_NE(error("", spec).find("no header"), std::string::npos);
  EXPECT_NE(error("T\tnaive\n1\t2\n", spec).find("no column 'flash'"), std::string::npos);
  EXPECT_NE(error("T\tflash\n1\n", spec).find("row 1 has 1 cells"), std::string::npos);
  EXPECT_NE(error("T\tflash\n1\tabc\n", spec).find("'abc' is not a number"), std::string::npos);
  // A column that is not plotted may hold text.
  EXPECT_TRUE(TablePlot("name\tT\tflash\nrun a\t1\t2\n", spec).ok());
  spec.log_y = true;
  EXPECT_NE(error("T\tflash\n1\t0\n", spec).find("has no logarithm"), std::string::npos);
}

}  // namespace
}  // namespace ladder::report
