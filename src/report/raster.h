// Paints a laid-out plot (plot.h) into an RGB image for the report's PNG
// files: filled rectangles and polygons, lines of any width (solid or
// dashed), and text in a built-in 5x7 bitmap font (upper case, digits and
// ASCII punctuation; lower case is drawn as upper case, anything else as '?').
// No anti-aliasing: the pictures are for looking at, not for print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/report/plot.h"

namespace ladder::report {

// 8-bit RGB pixels, row-major from the top left, 3 bytes a pixel.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Image(int w, int h) : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3, 255) {}
  Color At(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * width + x) * 3;
    return Color(rgb[i], rgb[i + 1], rgb[i + 2]);
  }
};

// Drawing on an Image; everything is clipped to the image. Coordinates are
// pixel-space doubles as in Shape (y down); a pixel is covered when its
// centre is.
class Canvas {
 public:
  explicit Canvas(Image* image) : image_(image) {}
  void FillRect(double x0, double y0, double x1, double y1, Color color);
  // Even-odd fill of the polygon through `points` (closed implicitly).
  void FillPolygon(const std::vector<Point>& points, Color color);
  // A polyline `width` pixels thick; dashed is 4 pixels on, 3 off.
  void DrawPolyline(const std::vector<Point>& points, Color color, double width, bool dashed);
  // Text whose vertical centre is at y, aligned on x; each font pixel is
  // size x size image pixels, each character 6 * size wide.
  void DrawText(double x, double y, const std::string& text, Color color, int size,
                Shape::Align align);

 private:
  void Set(int x, int y, Color color);
  Image* image_;
};

// The Scene painted on a white image of its size.
Image Rasterize(const Scene& scene);

}  // namespace ladder::report
