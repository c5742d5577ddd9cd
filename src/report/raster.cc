#include "src/report/raster.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace ladder::report {
namespace {

// The bitmap font: for each character, 7 rows of 5 pixels ('#' set).
struct Glyph {
  char c;
  const char* rows;  // 35 characters, row by row
};
// clang-format off
constexpr Glyph kFont[] = {
    {' ', "....." "....." "....." "....." "....." "....." "....."},
    {'!', "..#.." "..#.." "..#.." "..#.." "..#.." "....." "..#.."},
    {'"', ".#.#." ".#.#." "....." "....." "....." "....." "....."},
    {'#', ".#.#." ".#.#." "#####" ".#.#." "#####" ".#.#." ".#.#."},
    {'%', "##..." "##..#" "...#." "..#.." ".#..." "#..##" "...##"},
    {'&', ".##.." "#..#." "#.#.." ".#..." "#.#.#" "#..#." ".##.#"},
    {'\'', "..#.." "..#.." "....." "....." "....." "....." "....."},
    {'(', "...#." "..#.." ".#..." ".#..." ".#..." "..#.." "...#."},
    {')', ".#..." "..#.." "...#." "...#." "...#." "..#.." ".#..."},
    {'*', "....." "..#.." "#.#.#" ".###." "#.#.#" "..#.." "....."},
    {'+', "....." "..#.." "..#.." "#####" "..#.." "..#.." "....."},
    {',', "....." "....." "....." "....." ".##.." "..#.." ".#..."},
    {'-', "....." "....." "....." "#####" "....." "....." "....."},
    {'.', "....." "....." "....." "....." "....." ".##.." ".##.."},
    {'/', "....." "....#" "...#." "..#.." ".#..." "#...." "....."},
    {'0', ".###." "#...#" "#..##" "#.#.#" "##..#" "#...#" ".###."},
    {'1', "..#.." ".##.." "..#.." "..#.." "..#.." "..#.." ".###."},
    {'2', ".###." "#...#" "....#" "...#." "..#.." ".#..." "#####"},
    {'3', "#####" "...#." "..#.." "...#." "....#" "#...#" ".###."},
    {'4', "...#." "..##." ".#.#." "#..#." "#####" "...#." "...#."},
    {'5', "#####" "#...." "####." "....#" "....#" "#...#" ".###."},
    {'6', "..##." ".#..." "#...." "####." "#...#" "#...#" ".###."},
    {'7', "#####" "....#" "...#." "..#.." ".#..." ".#..." ".#..."},
    {'8', ".###." "#...#" "#...#" ".###." "#...#" "#...#" ".###."},
    {'9', ".###." "#...#" "#...#" ".####" "....#" "...#." ".##.."},
    {':', "....." ".##.." ".##.." "....." ".##.." ".##.." "....."},
    {';', "....." ".##.." ".##.." "....." ".##.." "..#.." ".#..."},
    {'<', "...#." "..#.." ".#..." "#...." ".#..." "..#.." "...#."},
    {'=', "....." "....." "#####" "....." "#####" "....." "....."},
    {'>', ".#..." "..#.." "...#." "....#" "...#." "..#.." ".#..."},
    {'?', ".###." "#...#" "....#" "...#." "..#.." "....." "..#.."},
    {'A', ".###." "#...#" "#...#" "#####" "#...#" "#...#" "#...#"},
    {'B', "####." "#...#" "#...#" "####." "#...#" "#...#" "####."},
    {'C', ".###." "#...#" "#...." "#...." "#...." "#...#" ".###."},
    {'D', "###.." "#..#." "#...#" "#...#" "#...#" "#..#." "###.."},
    {'E', "#####" "#...." "#...." "####." "#...." "#...." "#####"},
    {'F', "#####" "#...." "#...." "####." "#...." "#...." "#...."},
    {'G', ".###." "#...#" "#...." "#.###" "#...#" "#...#" ".####"},
    {'H', "#...#" "#...#" "#...#" "#####" "#...#" "#...#" "#...#"},
    {'I', ".###." "..#.." "..#.." "..#.." "..#.." "..#.." ".###."},
    {'J', "..###" "...#." "...#." "...#." "...#." "#..#." ".##.."},
    {'K', "#...#" "#..#." "#.#.." "##..." "#.#.." "#..#." "#...#"},
    {'L', "#...." "#...." "#...." "#...." "#...." "#...." "#####"},
    {'M', "#...#" "##.##" "#.#.#" "#.#.#" "#...#" "#...#" "#...#"},
    {'N', "#...#" "#...#" "##..#" "#.#.#" "#..##" "#...#" "#...#"},
    {'O', ".###." "#...#" "#...#" "#...#" "#...#" "#...#" ".###."},
    {'P', "####." "#...#" "#...#" "####." "#...." "#...." "#...."},
    {'Q', ".###." "#...#" "#...#" "#...#" "#.#.#" "#..#." ".##.#"},
    {'R', "####." "#...#" "#...#" "####." "#.#.." "#..#." "#...#"},
    {'S', ".####" "#...." "#...." ".###." "....#" "....#" "####."},
    {'T', "#####" "..#.." "..#.." "..#.." "..#.." "..#.." "..#.."},
    {'U', "#...#" "#...#" "#...#" "#...#" "#...#" "#...#" ".###."},
    {'V', "#...#" "#...#" "#...#" "#...#" "#...#" ".#.#." "..#.."},
    {'W', "#...#" "#...#" "#...#" "#.#.#" "#.#.#" "#.#.#" ".#.#."},
    {'X', "#...#" "#...#" ".#.#." "..#.." ".#.#." "#...#" "#...#"},
    {'Y', "#...#" "#...#" ".#.#." "..#.." "..#.." "..#.." "..#.."},
    {'Z', "#####" "....#" "...#." "..#.." ".#..." "#...." "#####"},
    {'[', ".###." ".#..." ".#..." ".#..." ".#..." ".#..." ".###."},
    {']', ".###." "...#." "...#." "...#." "...#." "...#." ".###."},
    {'_', "....." "....." "....." "....." "....." "....." "#####"},
    {'|', "..#.." "..#.." "..#.." "..#.." "..#.." "..#.." "..#.."},
};
// clang-format on

const char* GlyphRows(char c) {
  c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return GlyphRows('?');
}

}  // namespace

void Canvas::Set(int x, int y, Color color) {
  if (x < 0 || y < 0 || x >= image_->width || y >= image_->height) return;
  const size_t i = (static_cast<size_t>(y) * image_->width + x) * 3;
  image_->rgb[i] = color.r;
  image_->rgb[i + 1] = color.g;
  image_->rgb[i + 2] = color.b;
}

void Canvas::FillRect(double x0, double y0, double x1, double y1, Color color) {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  // Pixels whose centre (x + 0.5, y + 0.5) lies inside; at least one pixel
  // each way so that thin bars stay visible.
  const int xa = static_cast<int>(std::floor(x0 + 0.5));
  const int ya = static_cast<int>(std::floor(y0 + 0.5));
  const int xb = std::max(xa + 1, static_cast<int>(std::floor(x1 + 0.5)));
  const int yb = std::max(ya + 1, static_cast<int>(std::floor(y1 + 0.5)));
  for (int y = std::max(ya, 0); y < std::min(yb, image_->height); ++y) {
    for (int x = std::max(xa, 0); x < std::min(xb, image_->width); ++x) Set(x, y, color);
  }
}

void Canvas::FillPolygon(const std::vector<Point>& points, Color color) {
  if (points.size() < 3) return;
  double top = points[0].y, bottom = points[0].y;
  for (const Point& p : points) {
    top = std::min(top, p.y);
    bottom = std::max(bottom, p.y);
  }
  std::vector<double> crossings;
  for (int y = std::max(0, static_cast<int>(std::floor(top)));
       y <= std::min(image_->height - 1, static_cast<int>(std::ceil(bottom))); ++y) {
    // Where the scanline through the pixel centres crosses the edges;
    // half-open in y so a shared vertex counts once.
    const double sy = y + 0.5;
    crossings.clear();
    for (size_t i = 0; i < points.size(); ++i) {
      const Point& a = points[i];
      const Point& b = points[(i + 1) % points.size()];
      if ((a.y <= sy && b.y > sy) || (b.y <= sy && a.y > sy)) {
        crossings.push_back(a.x + (sy - a.y) / (b.y - a.y) * (b.x - a.x));
      }
    }
    std::sort(crossings.begin(), crossings.end());
    for (size_t i = 0; i + 1 < crossings.size(); i += 2) {
      const int xa = static_cast<int>(std::ceil(crossings[i] - 0.5));
      const int xb = static_cast<int>(std::floor(crossings[i + 1] - 0.5));
      for (int x = xa; x <= xb; ++x) Set(x, y, color);
    }
  }
}

void Canvas::DrawPolyline(const std::vector<Point>& points, Color color, double width,
                          bool dashed) {
  // Stamp a width x width square every half pixel along each segment; the
  // dash pattern runs on along the whole line.
  const double half = std::max(width, 1.0) / 2;
  double travelled = 0;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const Point a = points[i], b = points[i + 1];
    const double length = std::hypot(b.x - a.x, b.y - a.y);
    const int steps = std::max(1, static_cast<int>(std::ceil(length * 2)));
    for (int s = 0; s <= steps; ++s) {
      const double t = static_cast<double>(s) / steps;
      if (dashed && std::fmod(travelled + t * length, 7.0) >= 4.0) continue;
      const double x = a.x + (b.x - a.x) * t, y = a.y + (b.y - a.y) * t;
      FillRect(x - half, y - half, x + half, y + half, color);
    }
    travelled += length;
  }
}

void Canvas::DrawText(double x, double y, const std::string& text, Color color, int size,
                      Shape::Align align) {
  const double width = static_cast<double>(text.size()) * 6 * size;
  double left = align == Shape::Align::kLeft     ? x
                : align == Shape::Align::kCenter ? x - width / 2
                                                 : x - width;
  const int x0 = static_cast<int>(std::lround(left));
  const int y0 = static_cast<int>(std::lround(y - 3.5 * size));
  for (size_t i = 0; i < text.size(); ++i) {
    const char* rows = GlyphRows(text[i]);
    for (int r = 0; r < 7; ++r) {
      for (int c = 0; c < 5; ++c) {
        if (rows[r * 5 + c] != '#') continue;
        const int px = x0 + static_cast<int>(i) * 6 * size + c * size, py = y0 + r * size;
        for (int dy = 0; dy < size; ++dy) {
          for (int dx = 0; dx < size; ++dx) Set(px + dx, py + dy, color);
        }
      }
    }
  }
}

Image Rasterize(const Scene& scene) {
  Image image(scene.width, scene.height);
  Canvas canvas(&image);
  for (const Shape& s : scene.shapes) {
    switch (s.kind) {
      case Shape::Kind::kPolyline:
        canvas.DrawPolyline(s.points, s.color, s.width, s.dashed);
        break;
      case Shape::Kind::kPolygon:
        canvas.FillPolygon(s.points, s.color);
        break;
      case Shape::Kind::kRect:
        canvas.FillRect(s.points[0].x, s.points[0].y, s.points[1].x, s.points[1].y, s.color);
        break;
      case Shape::Kind::kText:
        canvas.DrawText(s.points[0].x, s.points[0].y, s.text, s.color, s.text_size, s.align);
        break;
    }
  }
  return image;
}

}  // namespace ladder::report
