// The plot model of `ladder report`: a small description of one chart (line
// series, stacked areas, stacked bars, a heatmap, event markers, titles), and
// its layout into a Scene of pixel-space shapes. Both renderers draw the same
// Scene: svg.h writes it as inline SVG for the HTML page, raster.h paints it
// into pixels for the PNG files, so the two cannot disagree about where
// anything is.
//
// Everything here is plain data and pure functions; any thread may call them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder::report {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  Color() = default;
  constexpr Color(uint8_t r_, uint8_t g_, uint8_t b_) : r(r_), g(g_), b(b_) {}
  bool operator==(const Color&) const = default;
};

// The palette series take their colours from, in order (then repeating).
Color SeriesColor(int index);

// One named series of (x, y) points. A NaN y is a gap: the line breaks there.
struct Series {
  std::string name;
  std::vector<double> x, y;
  bool dashed = false;
};

// A vertical marker at x (a checkpoint, a restart...), labelled in the legend
// by its kind; markers of one kind share a colour.
struct Marker {
  double x = 0;
  std::string kind;
};

struct Plot {
  enum class Kind {
    kLines,        // `series` as lines
    kStackedArea,  // `series` stacked bottom to top (all on the same x), `overlay` as lines
    kStackedBars,  // one bar per category, `series[i].y[c]` the layers of category c
    kHeatmap,      // `cells[row][col]`, rows labelled `row_labels`, columns at `x_values`
  };
  Kind kind = Kind::kLines;
  std::string title;
  std::string x_label, y_label;  // units, e.g. "step", "seconds"
  std::vector<Series> series;
  std::vector<Series> overlay;             // kStackedArea: lines drawn over the stack
  std::vector<std::string> categories;     // kStackedBars
  std::vector<std::string> row_labels;     // kHeatmap
  std::vector<double> x_values;            // kHeatmap columns
  std::vector<std::vector<double>> cells;  // kHeatmap, NaN = no value
  std::vector<Marker> markers;
};

// An axis range and its tick positions: "nice" steps (1, 2 or 5 times a
// power of ten) covering [lo, hi]. Degenerate input still gives a usable
// axis: NaN and infinities are ignored, a single value v spans v +- 1 (or
// a tenth of |v|), and no finite value at all gives [0, 1].
struct Axis {
  double min = 0, max = 1;
  double step = 1;
  std::vector<double> ticks;
};
Axis NiceAxis(const std::vector<double>& values, int target_ticks = 5);
// A tick's text, with as many decimals as the step needs ("0.25", "1.5k",
// "2e-05").
std::string TickLabel(double value, double step);

// Shapes in pixel coordinates, y down, (0, 0) the top left corner.
struct Point {
  double x = 0, y = 0;
};
struct Shape {
  enum class Kind { kPolyline, kPolygon, kRect, kText };
  Kind kind = Kind::kPolyline;
  std::vector<Point>
      points;        // polyline/polygon vertices; rect: top-left, bottom-right; text: anchor
  Color color;       // stroke of a polyline, fill otherwise
  double width = 1;  // polyline stroke width
  bool dashed = false;
  std::string text;
  int text_size = 1;  // 1 = labels, 2 = titles
  enum class Align { kLeft, kCenter, kRight } align = Align::kLeft;
};
struct Scene {
  int width = 0, height = 0;
  std::vector<Shape> shapes;  // in painting order
};

// Whether `plot` has anything to draw: a finite point, a bar category, a
// heatmap cell.
bool HasData(const Plot& plot);

// Lays `plot` out in a width x height picture: title, legend, axes with
// ticks and labels, and the data. A plot without data (HasData false)
// gives only its title and a "no data" note.
Scene LayoutPlot(const Plot& plot, int width, int height);

}  // namespace ladder::report
