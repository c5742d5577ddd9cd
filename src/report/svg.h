// Writes a laid-out plot (plot.h) as an inline <svg> element for the HTML
// report: no scripts, no external fonts or links.
#pragma once

#include <string>

#include "src/report/plot.h"

namespace ladder::report {

// The <svg>...</svg> element of `scene`, sized scene.width x scene.height and
// scaling with the page (viewBox). `title` becomes its accessible name.
std::string RenderSvg(const Scene& scene, const std::string& title);

// `text` with &, <, >, " and ' replaced by entities, for HTML and SVG text.
std::string EscapeXml(const std::string& text);

}  // namespace ladder::report
