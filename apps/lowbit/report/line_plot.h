// Line charts as PNG files (e.g. `lowbit eval kvcache`: KV-cache memory against
// generated tokens, one line per policy): axes with 1-2-5 ticks and compact labels,
// a light grid, a legend, a title and axis labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/canvas.h"

namespace lowbit::report {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // same length, at least one point, all finite
  std::uint32_t rgb = 0;     // 0xRRGGBB; 0 picks the default palette colour of this series' index
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  int width = 900, height = 560;
};

// Where data lands in the image; exposed so tests and callers can find a point's pixel.
struct PlotFrame {
  int left = 0, top = 0, right = 0, bottom = 0;  // plot area in pixels, [left, right] x [top, bottom]
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // axis ranges (the outermost ticks)
  std::vector<double> x_ticks, y_ticks;
  double px(double x) const;  // data -> pixel coordinates (continuous; pixel centres at +0.5)
  double py(double y) const;
};

// Throws lowbit::Error on bad input (no series, an empty series, x/y lengths that
// differ, NaN or infinite values, a size too small for the labels).
PlotFrame line_plot_frame(const LinePlot& plot);
Canvas render_line_plot(const LinePlot& plot);
void write_line_plot_png(const LinePlot& plot, const std::string& path);

// Pieces, exposed for tests.
std::uint32_t default_series_color(std::size_t index);  // blue, orange, green, red, purple, ...
// Ticks at multiples of a 1, 2 or 5 x 10^k step covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);
// Compact label: 1.5M, 200k, 0.25, -3 (digits enough to tell ticks `step` apart).
std::string format_tick(double value, double step);

}  // namespace lowbit::report
