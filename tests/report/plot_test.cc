// Axis ranges and ticks, including degenerate data, and the layout and SVG
// of plots with gaps and single points.
#include "src/report/plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "src/report/svg.h"

namespace ladder::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(NiceAxisTest, CoversTheDataWithRoundTicks) {
  const Axis a = NiceAxis({0.3, 9.2});
  EXPECT_EQ(a.min, 0);
  EXPECT_EQ(a.max, 10);
  EXPECT_EQ(a.step, 2);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const Axis b = NiceAxis({2.31, 2.87});
  EXPECT_DOUBLE_EQ(b.step, 0.1);
  EXPECT_DOUBLE_EQ(b.min, 2.3);
  EXPECT_DOUBLE_EQ(b.max, 2.9);
  EXPECT_EQ(b.ticks.size(), 7u);
  EXPECT_EQ(TickLabel(b.ticks[1], b.step), "2.4");
}

TEST(NiceAxisTest, DegenerateDataStillGivesARange) {
  const Axis one = NiceAxis({5});
  EXPECT_LT(one.min, 5);
  EXPECT_GT(one.max, 5);
  const Axis constant = NiceAxis({3, 3, 3});
  EXPECT_LT(constant.min, 3);
  EXPECT_GT(constant.max, 3);
  const Axis zero = NiceAxis({0, 0});
  EXPECT_EQ(zero.min, -1);
  EXPECT_EQ(zero.max, 1);
  const Axis nothing = NiceAxis({kNaN, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(nothing.min, 0);
  EXPECT_EQ(nothing.max, 1);
  const Axis empty = NiceAxis({});
  EXPECT_EQ(empty.min, 0);
  EXPECT_EQ(empty.max, 1);
  const Axis gappy = NiceAxis({kNaN, 1, kNaN, 4});
  EXPECT_EQ(gappy.min, 1);
  EXPECT_EQ(gappy.max, 4);
  for (const Axis& a : {one, constant, zero, nothing, empty, gappy}) {
    EXPECT_GE(a.ticks.size(), 2u);
    for (double t : a.ticks) EXPECT_TRUE(std::isfinite(t));
  }
}

TEST(TickLabelTest, AsManyDecimalsAsTheStepNeeds) {
  EXPECT_EQ(TickLabel(0.1 + 0.2, 0.1), "0.3");
  EXPECT_EQ(TickLabel(0.25, 0.05), "0.25");
  EXPECT_EQ(TickLabel(1500, 500), "1500");
  EXPECT_EQ(TickLabel(20000, 5000), "20k");
  EXPECT_EQ(TickLabel(3e6, 1e6), "3M");
  EXPECT_EQ(TickLabel(1e-17, 0.5), "0");
  EXPECT_EQ(TickLabel(kNaN, 1), "-");
}

bool AllFinite(const Scene& scene) {
  for (const Shape& s : scene.shapes) {
    for (const Point& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
    }
  }
  return true;
}

int Count(const Scene& scene, Shape::Kind kind) {
  int n = 0;
  for (const Shape& s : scene.shapes) n += s.kind == kind;
  return n;
}

TEST(LayoutPlotTest, NaNBreaksALineAndALonePointIsDrawn) {
  Plot plot;
  plot.title = "loss";
  Series s;
  s.name = "loss";
  s.x = {1, 2, 3, 4, 5};
  s.y = {3, 2.5, kNaN, 2, 1.9};
  plot.series.push_back(s);
  const Scene two_runs = LayoutPlot(plot, 400, 200);
  EXPECT_TRUE(AllFinite(two_runs));
  int data_lines = 0;
  for (const Shape& shape : two_runs.shapes) {
    data_lines += shape.kind == Shape::Kind::kPolyline && shape.color == SeriesColor(0);
  }
  EXPECT_EQ(data_lines, 2);

  plot.series[0].x = {7};
  plot.series[0].y = {2};
  const Scene single = LayoutPlot(plot, 400, 200);
  EXPECT_TRUE(AllFinite(single));
  bool square = false;
  for (const Shape& shape : single.shapes) {
    square = square || (shape.kind == Shape::Kind::kRect && shape.color == SeriesColor(0) &&
                        shape.points[1].x - shape.points[0].x == 4);
  }
  EXPECT_TRUE(square) << "a single point is drawn as a small square";
}

TEST(LayoutPlotTest, EveryKindLaysOutInsideThePicture) {
  Plot stacked;
  stacked.kind = Plot::Kind::kStackedArea;
  for (const char* name : {"forward", "backward"}) {
    Series s;
    s.name = name;
    s.x = {1, 2, 3};
    s.y = {0.5, kNaN, 0.7};
    stacked.series.push_back(s);
  }
  Plot bars;
  bars.kind = Plot::Kind::kStackedBars;
  bars.categories = {"rank 0", "rank 1"};
  bars.series = stacked.series;
  Plot heat;
  heat.kind = Plot::Kind::kHeatmap;
  heat.x_values = {1, 2, 3};
  heat.cells = {{0.1, 0.2, 0.1}, {0.1, kNaN, 0.4}};
  heat.row_labels = {"rank 0", "rank 1"};
  for (const Plot& plot : {stacked, bars, heat}) {
    const Scene scene = LayoutPlot(plot, 500, 250);
    EXPECT_TRUE(AllFinite(scene));
    for (const Shape& s : scene.shapes) {
      for (const Point& p : s.points) {
        EXPECT_GE(p.x, -1);
        EXPECT_LE(p.x, 501);
        EXPECT_GE(p.y, -1);
        EXPECT_LE(p.y, 251);
      }
    }
  }
  EXPECT_EQ(Count(LayoutPlot(stacked, 500, 250), Shape::Kind::kPolygon), 2);
  // The background, five legend swatches, and the 5 cells that are not NaN.
  EXPECT_EQ(Count(LayoutPlot(heat, 500, 250), Shape::Kind::kRect), 1 + 5 + 5);
}

TEST(LayoutPlotTest, LongRunsAreThinnedToThePixelColumnsButKeepTheirPeaks) {
  Plot lines;
  Series s;
  s.name = "loss";
  for (int i = 0; i < 20000; ++i) {
    s.x.push_back(i);
    s.y.push_back(i == 12345 ? 10.0 : 1.0);  // one spike among flat steps
  }
  lines.series.push_back(s);
  const Scene scene = LayoutPlot(lines, 400, 200);
  const Shape* line = nullptr;
  for (const Shape& shape : scene.shapes) {
    if (shape.kind == Shape::Kind::kPolyline && shape.color == SeriesColor(0)) line = &shape;
  }
  ASSERT_NE(line, nullptr);
  EXPECT_LE(line->points.size(), 4u * 400);
  double top = 1e9;
  for (const Point& p : line->points) top = std::min(top, p.y);
  // The spike is the highest value, so it reaches the top of the axis range (10).
  double axis_top = 1e9;
  for (const Shape& shape : scene.shapes) {
    if (shape.kind == Shape::Kind::kText && shape.text == "10") axis_top = shape.points[0].y;
  }
  EXPECT_NEAR(top, axis_top, 0.5) << "the spike survives thinning";

  Plot heat;
  heat.kind = Plot::Kind::kHeatmap;
  heat.row_labels = {"rank 0"};
  heat.cells.assign(1, {});
  for (int i = 0; i < 20000; ++i) {
    heat.x_values.push_back(i);
    heat.cells[0].push_back(i == 777 ? 5.0 : 1.0);
  }
  const Scene map = LayoutPlot(heat, 400, 200);
  int cells = 0;
  bool darkest = false;
  for (const Shape& shape : map.shapes) {
    if (shape.kind != Shape::Kind::kRect || shape.points[0].y < 40) continue;  // legend swatches
    ++cells;
    darkest = darkest || shape.color == Color(153, 52, 4);
  }
  EXPECT_LE(cells, 400);
  EXPECT_TRUE(darkest) << "the slow step keeps its colour after merging";
}

TEST(SvgTest, EscapesTextAndDrawsEveryShape) {
  Plot plot;
  plot.title = "a <b> & \"c\"";
  Series s;
  s.name = "x<y";
  s.x = {0, 1};
  s.y = {0, 1};
  plot.series.push_back(s);
  const Scene scene = LayoutPlot(plot, 300, 150);
  const std::string svg = RenderSvg(scene, plot.title);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 300 150\"", 0), 0u);
  EXPECT_NE(svg.find("aria-label=\"a &lt;b&gt; &amp; &quot;c&quot;\""), std::string::npos);
  EXPECT_NE(svg.find(">x&lt;y</text>"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  int elements = 0;
  for (size_t at = svg.find("\n<"); at != std::string::npos; at = svg.find("\n<", at + 1))
    ++elements;
  EXPECT_EQ(elements, static_cast<int>(scene.shapes.size()) + 1)
      << "one element per shape, then </svg>";
}

}  // namespace
}  // namespace ladder::report
