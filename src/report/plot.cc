#include "src/report/plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_format.h"

namespace ladder::report {
namespace {

// Text metrics both renderers honour: the bitmap font's glyph cell is 6 x 8
// pixels at size 1 (raster.cc), and a 10px monospace font advances 6 pixels
// too (svg.cc), so a label's width is known before either draws it.
constexpr int kCharWidth = 6;
constexpr int kLineHeight = 12;

const Color kInk(40, 40, 40);
const Color kGrid(225, 225, 225);
const Color kMuted(110, 110, 110);

double TextWidth(const std::string& s, int size) {
  return static_cast<double>(s.size() * kCharWidth * size);
}

Shape Text(double x, double y, std::string text, Color color, Shape::Align align, int size = 1) {
  Shape s;
  s.kind = Shape::Kind::kText;
  s.points = {Point{x, y}};
  s.color = color;
  s.text = std::move(text);
  s.text_size = size;
  s.align = align;
  return s;
}

Shape Rect(double x0, double y0, double x1, double y1, Color color) {
  Shape s;
  s.kind = Shape::Kind::kRect;
  s.points = {Point{x0, y0}, Point{x1, y1}};
  s.color = color;
  return s;
}

Shape Line(std::vector<Point> points, Color color, double width, bool dashed = false) {
  Shape s;
  s.kind = Shape::Kind::kPolyline;
  s.points = std::move(points);
  s.color = color;
  s.width = width;
  s.dashed = dashed;
  return s;
}

// Markers of one kind share a colour, the same on every plot.
Color MarkerColor(const std::string& kind) {
  static const std::map<std::string, Color> kColors = {
      {"save", Color(46, 139, 87)},      {"mem_save", Color(32, 178, 170)},
      {"restore", Color(30, 90, 200)},   {"rollback", Color(230, 120, 0)},
      {"restart", Color(210, 30, 30)},   {"layout", Color(140, 60, 170)},
      {"straggler", Color(150, 90, 40)},
  };
  auto it = kColors.find(kind);
  return it == kColors.end() ? kMuted : it->second;
}

// The heatmap's colour scale: pale yellow (low) to dark red (high).
Color HeatColor(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const Color lo(255, 247, 188), mid(254, 153, 41), hi(153, 52, 4);
  const Color& a = t < 0.5 ? lo : mid;
  const Color& b = t < 0.5 ? mid : hi;
  const double u = t < 0.5 ? 2 * t : 2 * t - 1;
  auto mix = [u](uint8_t p, uint8_t q) {
    return static_cast<uint8_t>(std::lround(p + (q - p) * u));
  };
  return Color(mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b));
}

// The plotting area and the mapping from data to pixels.
struct Frame {
  double left, top, right, bottom;
  Axis x, y;
  double X(double v) const { return left + (v - x.min) / (x.max - x.min) * (right - left); }
  double Y(double v) const { return bottom - (v - y.min) / (y.max - y.min) * (bottom - top); }
};

struct LegendEntry {
  std::string name;
  Color color;
};

// Title and legend rows at the top; returns the y below them.
double LayoutHeader(const Plot& plot, const std::vector<LegendEntry>& legend, int width,
                    Scene* scene) {
  scene->shapes.push_back(Text(10, 14, plot.title, kInk, Shape::Align::kLeft, 2));
  double x = 10, y = 36;
  for (const LegendEntry& e : legend) {
    const double w = 14 + TextWidth(e.name, 1) + 14;
    if (x + w > width - 10 && x > 10) {
      x = 10;
      y += kLineHeight + 2;
    }
    scene->shapes.push_back(Rect(x, y - 4, x + 10, y + 4, e.color));
    scene->shapes.push_back(Text(x + 14, y, e.name, kInk, Shape::Align::kLeft));
    x += w;
  }
  return legend.empty() ? y - 10 : y + 10;
}

// Grid, axes, tick labels and the unit labels around `f`.
void LayoutAxes(const Plot& plot, const Frame& f, bool x_ticks, Scene* scene) {
  for (double t : f.y.ticks) {
    const double py = f.Y(t);
    scene->shapes.push_back(Line({{f.left, py}, {f.right, py}}, kGrid, 1));
    scene->shapes.push_back(
        Text(f.left - 5, py, TickLabel(t, f.y.step), kMuted, Shape::Align::kRight));
  }
  if (x_ticks) {
    for (double t : f.x.ticks) {
      const double px = f.X(t);
      scene->shapes.push_back(Line({{px, f.bottom}, {px, f.bottom + 4}}, kInk, 1));
      scene->shapes.push_back(
          Text(px, f.bottom + 12, TickLabel(t, f.x.step), kMuted, Shape::Align::kCenter));
    }
  }
  scene->shapes.push_back(
      Line({{f.left, f.top}, {f.left, f.bottom}, {f.right, f.bottom}}, kInk, 1));
  if (!plot.y_label.empty()) {
    scene->shapes.push_back(Text(f.left, f.top - 8, plot.y_label, kMuted, Shape::Align::kLeft));
  }
  if (!plot.x_label.empty()) {
    scene->shapes.push_back(
        Text((f.left + f.right) / 2, f.bottom + 26, plot.x_label, kMuted, Shape::Align::kCenter));
  }
}

double LeftMargin(const Axis& y, const std::vector<std::string>& extra_labels) {
  double w = 0;
  for (double t : y.ticks) w = std::max(w, TextWidth(TickLabel(t, y.step), 1));
  for (const std::string& s : extra_labels) w = std::max(w, TextWidth(s, 1));
  return std::max(40.0, w + 12);
}

// Which pixel column each x falls in, for thinning thousands of steps down
// to the few hundred columns a plot has.
int Column(double px) { return static_cast<int>(std::floor(px)); }

// Keeps, of the points in each pixel column, the first, lowest, highest and
// last (in order): the line drawn through them is the same picture, and a
// long run's page stays small.
std::vector<Point> ThinLine(const std::vector<Point>& points) {
  std::vector<Point> out;
  size_t last = points.size();  // index of the last point kept
  for (size_t i = 0; i < points.size();) {
    size_t end = i, low = i, high = i;
    for (; end < points.size() && Column(points[end].x) == Column(points[i].x); ++end) {
      if (points[end].y < points[low].y) low = end;
      if (points[end].y > points[high].y) high = end;
    }
    for (size_t k : {i, std::min(low, high), std::max(low, high), end - 1}) {
      if (k != last) out.push_back(points[k]);
      last = k;
    }
    i = end;
  }
  return out;
}

// A series as polylines broken at NaN; a lone point becomes a small square.
void LayoutSeries(const Series& s, const Frame& f, Color color, Scene* scene) {
  std::vector<Point> run;
  auto flush = [&] {
    if (run.size() == 1) {
      scene->shapes.push_back(Rect(run[0].x - 2, run[0].y - 2, run[0].x + 2, run[0].y + 2, color));
    } else if (run.size() > 1) {
      scene->shapes.push_back(Line(ThinLine(run), color, 1.5, s.dashed));
    }
    run.clear();
  };
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
      flush();
      continue;
    }
    run.push_back(Point{f.X(s.x[i]), f.Y(s.y[i])});
  }
  flush();
}

void LayoutMarkers(const Plot& plot, const Frame& f, Scene* scene) {
  for (const Marker& m : plot.markers) {
    if (!std::isfinite(m.x) || m.x < f.x.min || m.x > f.x.max) continue;
    const double px = f.X(m.x);
    scene->shapes.push_back(Line({{px, f.top}, {px, f.bottom}}, MarkerColor(m.kind), 1, true));
  }
}

std::vector<LegendEntry> MarkerLegend(const Plot& plot) {
  std::vector<LegendEntry> out;
  for (const Marker& m : plot.markers) {
    bool seen = false;
    for (const LegendEntry& e : out) seen = seen || e.name == m.kind;
    if (!seen) out.push_back(LegendEntry{m.kind, MarkerColor(m.kind)});
  }
  return out;
}

std::vector<double> AllX(const Plot& plot) {
  std::vector<double> xs;
  for (const auto* group : {&plot.series, &plot.overlay}) {
    for (const Series& s : *group) xs.insert(xs.end(), s.x.begin(), s.x.end());
  }
  return xs;
}

void LayoutLines(const Plot& plot, int width, int height, Scene* scene) {
  std::vector<LegendEntry> legend;
  std::vector<double> ys;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    legend.push_back(LegendEntry{plot.series[i].name, SeriesColor(static_cast<int>(i))});
    ys.insert(ys.end(), plot.series[i].y.begin(), plot.series[i].y.end());
  }
  for (const LegendEntry& e : MarkerLegend(plot)) legend.push_back(e);
  const double top = LayoutHeader(plot, legend, width, scene) + 16;
  Frame f{0, top, width - 16.0, height - 36.0, NiceAxis(AllX(plot)), NiceAxis(ys)};
  f.left = LeftMargin(f.y, {});
  LayoutAxes(plot, f, true, scene);
  LayoutMarkers(plot, f, scene);
  for (size_t i = 0; i < plot.series.size(); ++i) {
    LayoutSeries(plot.series[i], f, SeriesColor(static_cast<int>(i)), scene);
  }
}

void LayoutStackedArea(const Plot& plot, int width, int height, Scene* scene) {
  const std::vector<double>& xs = plot.series.front().x;
  // Running totals: layer i spans [base[i][k], base[i+1][k]] at x[k].
  std::vector<std::vector<double>> base(plot.series.size() + 1,
                                        std::vector<double>(xs.size(), 0.0));
  for (size_t i = 0; i < plot.series.size(); ++i) {
    for (size_t k = 0; k < xs.size(); ++k) {
      const double v = k < plot.series[i].y.size() ? plot.series[i].y[k] : 0.0;
      base[i + 1][k] = base[i][k] + (std::isfinite(v) && v > 0 ? v : 0.0);
    }
  }
  std::vector<double> ys = base.back();
  ys.push_back(0);
  for (const Series& s : plot.overlay) ys.insert(ys.end(), s.y.begin(), s.y.end());
  std::vector<LegendEntry> legend;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    legend.push_back(LegendEntry{plot.series[i].name, SeriesColor(static_cast<int>(i))});
  }
  // Overlay lines take dark palette entries (from 10 on) that read against the filled areas.
  const int first_overlay = 10;
  for (size_t i = 0; i < plot.overlay.size(); ++i) {
    legend.push_back(
        LegendEntry{plot.overlay[i].name, SeriesColor(first_overlay + static_cast<int>(i))});
  }
  for (const LegendEntry& e : MarkerLegend(plot)) legend.push_back(e);
  const double top = LayoutHeader(plot, legend, width, scene) + 16;
  Frame f{0, top, width - 16.0, height - 36.0, NiceAxis(AllX(plot)), NiceAxis(ys)};
  f.left = LeftMargin(f.y, {});
  LayoutAxes(plot, f, true, scene);
  // One vertex per pixel column: the mean of the steps in it (the mean of
  // running totals is the running total of the means, so layers still stack).
  std::vector<double> px;
  std::vector<std::vector<double>> level(base.size());
  std::vector<int> members;
  for (size_t k = 0; k < xs.size(); ++k) {
    const double x = f.X(xs[k]);
    if (px.empty() || Column(x) != Column(px.back() / members.back())) {
      px.push_back(0);
      members.push_back(0);
      for (auto& l : level) l.push_back(0);
    }
    px.back() += x;
    ++members.back();
    for (size_t i = 0; i < base.size(); ++i) level[i].back() += base[i][k];
  }
  for (size_t c = 0; c < px.size(); ++c) {
    px[c] /= members[c];
    for (auto& l : level) l[c] /= members[c];
  }
  for (size_t i = 0; i < plot.series.size(); ++i) {
    Shape area;
    area.kind = Shape::Kind::kPolygon;
    area.color = SeriesColor(static_cast<int>(i));
    for (size_t c = 0; c < px.size(); ++c) area.points.push_back({px[c], f.Y(level[i + 1][c])});
    for (size_t c = px.size(); c-- > 0;) area.points.push_back({px[c], f.Y(level[i][c])});
    // A single step has no width to fill: widen it to a visible band.
    if (px.size() == 1) {
      const double x = area.points[0].x;
      scene->shapes.push_back(Rect(x - 3, area.points[0].y, x + 3, area.points[1].y, area.color));
      continue;
    }
    scene->shapes.push_back(std::move(area));
  }
  LayoutMarkers(plot, f, scene);
  for (size_t i = 0; i < plot.overlay.size(); ++i) {
    LayoutSeries(plot.overlay[i], f, SeriesColor(first_overlay + static_cast<int>(i)), scene);
  }
}

void LayoutStackedBars(const Plot& plot, int width, int height, Scene* scene) {
  const size_t n = plot.categories.size();
  std::vector<double> totals(n, 0.0);
  for (const Series& s : plot.series) {
    for (size_t c = 0; c < n && c < s.y.size(); ++c) {
      if (std::isfinite(s.y[c]) && s.y[c] > 0) totals[c] += s.y[c];
    }
  }
  std::vector<double> ys = totals;
  ys.push_back(0);
  std::vector<LegendEntry> legend;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    legend.push_back(LegendEntry{plot.series[i].name, SeriesColor(static_cast<int>(i))});
  }
  const double top = LayoutHeader(plot, legend, width, scene) + 16;
  Axis x;
  x.min = 0;
  x.max = static_cast<double>(n);
  Frame f{0, top, width - 16.0, height - 36.0, x, NiceAxis(ys)};
  f.left = LeftMargin(f.y, {});
  LayoutAxes(plot, f, false, scene);
  const double slot = (f.right - f.left) / static_cast<double>(n);
  // Label every k-th category so the labels do not overlap.
  size_t widest = 1;
  for (const std::string& c : plot.categories) widest = std::max(widest, c.size());
  const size_t every = std::max<size_t>(
      1, static_cast<size_t>(std::ceil((widest * kCharWidth + 8) / std::max(slot, 1.0))));
  for (size_t c = 0; c < n; ++c) {
    const double x0 = f.left + slot * (c + 0.2), x1 = f.left + slot * (c + 0.8);
    double level = 0;
    for (size_t i = 0; i < plot.series.size(); ++i) {
      const double v = c < plot.series[i].y.size() ? plot.series[i].y[c] : 0.0;
      if (!std::isfinite(v) || v <= 0) continue;
      scene->shapes.push_back(
          Rect(x0, f.Y(level + v), x1, f.Y(level), SeriesColor(static_cast<int>(i))));
      level += v;
    }
    if (c % every == 0) {
      scene->shapes.push_back(
          Text((x0 + x1) / 2, f.bottom + 12, plot.categories[c], kMuted, Shape::Align::kCenter));
    }
  }
}

void LayoutHeatmap(const Plot& plot, int width, int height, Scene* scene) {
  const size_t rows = plot.cells.size(), cols = plot.x_values.size();
  std::vector<double> values;
  for (const auto& row : plot.cells) {
    for (double v : row) {
      if (std::isfinite(v)) values.push_back(v);
    }
  }
  const Axis scale = NiceAxis(values, 4);
  const double lo = values.empty() ? 0 : *std::min_element(values.begin(), values.end());
  const double hi = values.empty() ? 1 : *std::max_element(values.begin(), values.end());
  // The legend is the colour scale: five swatches from the lowest value to the highest.
  std::vector<LegendEntry> legend;
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4.0;
    legend.push_back(LegendEntry{TickLabel(v, scale.step / 10), HeatColor(i / 4.0)});
  }
  const double top = LayoutHeader(plot, legend, width, scene) + 16;
  Axis x = NiceAxis(plot.x_values);
  // Cells are centred on their x value: widen the range by half a column each side.
  if (cols > 1) {
    const double half = (plot.x_values.back() - plot.x_values.front()) / (cols - 1) / 2;
    x.min = std::min(x.min, plot.x_values.front() - half);
    x.max = std::max(x.max, plot.x_values.back() + half);
  }
  Axis y;
  y.min = 0;
  y.max = static_cast<double>(rows);
  Frame f{LeftMargin(Axis(), plot.row_labels), top, width - 16.0, height - 36.0, x, y};
  f.y.ticks.clear();
  LayoutAxes(plot, f, true, scene);
  const double row_h = (f.bottom - f.top) / static_cast<double>(rows);
  const double col_w = cols > 1 ? f.X(plot.x_values[1]) - f.X(plot.x_values[0]) : f.right - f.left;
  const size_t label_every =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(kLineHeight / row_h)));
  for (size_t r = 0; r < rows; ++r) {
    const double y0 = f.top + row_h * r;
    // Columns that share a pixel column become one cell holding the largest
    // value: a slow step stays visible however long the run.
    for (size_t c = 0; c < cols && c < plot.cells[r].size();) {
      auto centre = [&](size_t i) {
        return cols > 1 ? f.X(plot.x_values[i]) : (f.left + f.right) / 2;
      };
      size_t end = c;
      double v = -std::numeric_limits<double>::infinity();
      for (; end < cols && end < plot.cells[r].size() && Column(centre(end)) == Column(centre(c));
           ++end) {
        if (std::isfinite(plot.cells[r][end])) v = std::max(v, plot.cells[r][end]);
      }
      if (std::isfinite(v)) {
        scene->shapes.push_back(Rect(centre(c) - col_w / 2, y0, centre(end - 1) + col_w / 2,
                                     y0 + row_h, HeatColor(hi > lo ? (v - lo) / (hi - lo) : 0.5)));
      }
      c = end;
    }
    if (r % label_every == 0 && r < plot.row_labels.size()) {
      scene->shapes.push_back(
          Text(f.left - 5, y0 + row_h / 2, plot.row_labels[r], kMuted, Shape::Align::kRight));
    }
  }
}

}  // namespace

Color SeriesColor(int index) {
  // Distinct on white and for most colour-blind readers (Okabe-Ito order, then extras).
  static const Color kPalette[] = {
      Color(0, 114, 178),  Color(230, 159, 0),  Color(0, 158, 115),  Color(204, 121, 167),
      Color(86, 180, 233), Color(213, 94, 0),   Color(240, 228, 66), Color(120, 120, 120),
      Color(120, 60, 160), Color(160, 100, 40), Color(20, 60, 120),  Color(200, 40, 60),
  };
  constexpr int n = sizeof(kPalette) / sizeof(kPalette[0]);
  return kPalette[((index % n) + n) % n];
}

Axis NiceAxis(const std::vector<double>& values, int target_ticks) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  } else if (hi - lo <= 1e-12 * std::max(std::abs(lo), std::abs(hi))) {
    const double pad = lo == 0 ? 1 : std::abs(lo) / 10;
    lo -= pad;
    hi += pad;
  }
  // The step: the raw spacing rounded to the nearest of 1, 2 or 5 times a
  // power of ten, so the tick count stays near the target.
  const double raw = (hi - lo) / std::max(1, target_ticks);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double frac = raw / power;
  const double nice = frac < 1.5 ? 1 : frac < 3 ? 2 : frac < 7 ? 5 : 10;
  Axis axis;
  axis.step = nice * power;
  axis.min = std::floor(lo / axis.step) * axis.step;
  axis.max = std::ceil(hi / axis.step) * axis.step;
  if (axis.max <= axis.min) axis.max = axis.min + axis.step;
  for (double t = axis.min; t <= axis.max + axis.step * 1e-9; t += axis.step) {
    // Snap accumulated rounding (0.30000000000000004) to the step's grid.
    axis.ticks.push_back(std::round(t / axis.step) * axis.step);
  }
  return axis;
}

std::string TickLabel(double value, double step) {
  if (!std::isfinite(value)) return "-";
  if (std::abs(value) < step * 1e-6) return "0";
  const double mag = std::abs(value);
  if (mag >= 1e9 && step >= 1e8) return absl::StrFormat("%gG", value / 1e9);
  if (mag >= 1e6 && step >= 1e5) return absl::StrFormat("%gM", value / 1e6);
  if (mag >= 1e4 && step >= 1e3) return absl::StrFormat("%gk", value / 1e3);
  if (mag < 1e-3) return absl::StrFormat("%.3g", value);
  // Enough decimals to tell neighbouring ticks apart, and no more.
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
  return absl::StrFormat("%.*f", decimals, value);
}

bool HasData(const Plot& plot) {
  switch (plot.kind) {
    case Plot::Kind::kLines:
    case Plot::Kind::kStackedArea:
      for (const Series& s : plot.series) {
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
          if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) return true;
        }
      }
      return false;
    case Plot::Kind::kStackedBars:
      return !plot.categories.empty() && !plot.series.empty();
    case Plot::Kind::kHeatmap:
      return !plot.cells.empty() && !plot.x_values.empty();
  }
  return false;
}

Scene LayoutPlot(const Plot& plot, int width, int height) {
  Scene scene;
  scene.width = width;
  scene.height = height;
  scene.shapes.push_back(Rect(0, 0, width, height, Color(255, 255, 255)));
  if (!HasData(plot)) {
    scene.shapes.push_back(Text(10, 14, plot.title, kInk, Shape::Align::kLeft, 2));
    scene.shapes.push_back(
        Text(width / 2.0, height / 2.0, "no data", kMuted, Shape::Align::kCenter));
    return scene;
  }
  switch (plot.kind) {
    case Plot::Kind::kLines:
      LayoutLines(plot, width, height, &scene);
      break;
    case Plot::Kind::kStackedArea:
      LayoutStackedArea(plot, width, height, &scene);
      break;
    case Plot::Kind::kStackedBars:
      LayoutStackedBars(plot, width, height, &scene);
      break;
    case Plot::Kind::kHeatmap:
      LayoutHeatmap(plot, width, height, &scene);
      break;
  }
  return scene;
}

}  // namespace ladder::report
