#include "src/report/svg.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ladder::report {
namespace {

std::string Rgb(Color c) { return absl::StrFormat("#%02x%02x%02x", c.r, c.g, c.b); }

std::string Points(const std::vector<Point>& points) {
  std::string out;
  for (const Point& p : points)
    absl::StrAppendFormat(&out, "%s%.1f,%.1f", out.empty() ? "" : " ", p.x, p.y);
  return out;
}

}  // namespace

std::string EscapeXml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RenderSvg(const Scene& scene, const std::string& title) {
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"%s\" font-family=\"DejaVu Sans Mono, monospace\">\n",
      scene.width, scene.height, scene.width, scene.height, EscapeXml(title));
  for (const Shape& s : scene.shapes) {
    switch (s.kind) {
      case Shape::Kind::kPolyline:
        absl::StrAppendFormat(&out,
                              "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" "
                              "stroke-width=\"%.1f\"%s/>\n",
                              Points(s.points), Rgb(s.color), s.width,
                              s.dashed ? " stroke-dasharray=\"4 3\"" : "");
        break;
      case Shape::Kind::kPolygon:
        absl::StrAppendFormat(&out, "<polygon points=\"%s\" fill=\"%s\"/>\n", Points(s.points),
                              Rgb(s.color));
        break;
      case Shape::Kind::kRect:
        absl::StrAppendFormat(
            &out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
            s.points[0].x, s.points[0].y, s.points[1].x - s.points[0].x,
            s.points[1].y - s.points[0].y, Rgb(s.color));
        break;
      case Shape::Kind::kText: {
        // 10px monospace advances 6px a character, the bitmap font's cell (plot.cc).
        const char* anchor = s.align == Shape::Align::kLeft     ? "start"
                             : s.align == Shape::Align::kCenter ? "middle"
                                                                : "end";
        absl::StrAppendFormat(&out,
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" fill=\"%s\" "
                              "text-anchor=\"%s\" dominant-baseline=\"middle\"%s>%s</text>\n",
                              s.points[0].x, s.points[0].y, 10 * s.text_size, Rgb(s.color), anchor,
                              s.text_size > 1 ? " font-weight=\"bold\"" : "", EscapeXml(s.text));
        break;
      }
    }
  }
  out += "</svg>";
  return out;
}

}  // namespace ladder::report
