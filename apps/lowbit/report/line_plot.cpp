#include "report/line_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "lowbit/error.h"
#include "report/font.h"
#include "report/png.h"

namespace lowbit::report {
namespace {

constexpr int k_min_width = 240;
constexpr int k_min_height = 160;
constexpr int k_max_ticks = 50;

constexpr std::uint32_t k_background = 0xFFFFFF;
constexpr std::uint32_t k_ink = 0x222222;       // text
constexpr std::uint32_t k_axis = 0x555555;      // plot frame and tick marks
constexpr std::uint32_t k_grid = 0xDADADA;      // light dashed grid
constexpr std::uint32_t k_legend_edge = 0xBBBBBB;

std::string series_name(const PlotSeries& s, std::size_t i) {
  return "series '" + s.label + "' (#" + std::to_string(i) + ")";
}

void validate(const LinePlot& plot) {
  LOWBIT_CHECK(plot.width >= k_min_width && plot.width <= 8192, "plot width: expected ", k_min_width,
               "..8192 pixels, got ", plot.width);
  LOWBIT_CHECK(plot.height >= k_min_height && plot.height <= 8192, "plot height: expected ", k_min_height,
               "..8192 pixels, got ", plot.height);
  LOWBIT_CHECK(!plot.series.empty(), "plot series: expected at least one series, got none");
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    LOWBIT_CHECK(s.x.size() == s.y.size(), series_name(s, i), ": x has ", s.x.size(), " values but y has ",
                 s.y.size(), "; expected the same length");
    LOWBIT_CHECK(!s.x.empty(), series_name(s, i), ": expected at least one point, got none");
    LOWBIT_CHECK(s.rgb <= 0xFFFFFFu, series_name(s, i), ": rgb 0x", std::hex, s.rgb,
                 " is not a 0xRRGGBB colour");
    for (std::size_t k = 0; k < s.x.size(); ++k) {
      LOWBIT_CHECK(std::isfinite(s.x[k]), series_name(s, i), ": x[", k, "] is ", s.x[k], "; expected finite values");
      LOWBIT_CHECK(std::isfinite(s.y[k]), series_name(s, i), ": y[", k, "] is ", s.y[k], "; expected finite values");
    }
  }
}

// Axis range from data: a zero-width range (one point, a flat line) is widened so
// that the value sits mid-axis.
std::pair<double, double> data_range(const LinePlot& plot, bool use_x) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const PlotSeries& s : plot.series) {
    for (const double v : use_x ? s.x : s.y) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (lo == hi) {
    const double pad = lo == 0.0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  LOWBIT_CHECK(std::isfinite(hi - lo), "plot ", use_x ? "x" : "y", " values: range [", lo, ", ", hi,
               "] is too wide to draw");
  return {lo, hi};
}

struct Layout {
  int scale = 1;        // text scale of labels, ticks and legend
  int title_scale = 1;
  PlotFrame frame;
};

std::string tick_label(const std::vector<double>& ticks, std::size_t i) {
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : std::abs(ticks[0]);
  return format_tick(ticks[i], step);
}

Layout make_layout(const LinePlot& plot) {
  validate(plot);
  Layout l;
  // Font pixels grow with the image: 2x at the default 900x560.
  l.scale = std::max(1, static_cast<int>(std::lround(std::min(plot.width / 400.0, plot.height / 250.0))));
  l.title_scale = Canvas::text_width(plot.title, l.scale + 1) <= plot.width - 24 ? l.scale + 1 : l.scale;
  const int s = l.scale;
  const int pad = 6 * s;
  const int text_h = Canvas::text_height(s);

  PlotFrame& f = l.frame;
  const auto [x_lo, x_hi] = data_range(plot, true);
  const auto [y_lo, y_hi] = data_range(plot, false);
  f.x_ticks = nice_ticks(x_lo, x_hi, std::max(3, plot.width / 130));
  f.y_ticks = nice_ticks(y_lo, y_hi, std::max(3, plot.height / 90));
  f.x_min = f.x_ticks.front();
  f.x_max = f.x_ticks.back();
  f.y_min = f.y_ticks.front();
  f.y_max = f.y_ticks.back();

  int y_label_w = 0;
  for (std::size_t i = 0; i < f.y_ticks.size(); ++i)
    y_label_w = std::max(y_label_w, Canvas::text_width(tick_label(f.y_ticks, i), s));
  const int last_x_label_w = Canvas::text_width(tick_label(f.x_ticks, f.x_ticks.size() - 1), s);

  f.top = pad + (plot.title.empty() ? text_h / 2 : Canvas::text_height(l.title_scale) + pad);
  f.left = pad + (plot.y_label.empty() ? 0 : text_h + pad) + y_label_w + 4 * s;
  f.right = plot.width - 1 - std::max(pad, last_x_label_w / 2 + pad / 2);
  f.bottom = plot.height - 1 - (pad + (plot.x_label.empty() ? 0 : text_h + pad) + text_h + 4 * s);
  LOWBIT_CHECK(f.right - f.left >= 40 && f.bottom - f.top >= 40, "plot size: ", plot.width, "x", plot.height,
               " leaves no room for the data next to its labels; expected a larger width/height");
  return l;
}

std::uint32_t series_color(const PlotSeries& s, std::size_t i) {
  return s.rgb != 0 ? s.rgb : default_series_color(i);
}

// How many of the series' points (sampled along segments) fall inside a box: the
// legend goes to the corner where it hides the least data.
int points_inside(const LinePlot& plot, const PlotFrame& f, int x0, int y0, int w, int h) {
  int count = 0;
  for (const PlotSeries& s : plot.series) {
    for (std::size_t k = 0; k < s.x.size(); ++k) {
      const std::size_t next = std::min(k + 1, s.x.size() - 1);
      for (int t = 0; t < 16; ++t) {
        const double a = t / 16.0;
        const double px = f.px(s.x[k] + (s.x[next] - s.x[k]) * a);
        const double py = f.py(s.y[k] + (s.y[next] - s.y[k]) * a);
        if (px >= x0 && px < x0 + w && py >= y0 && py < y0 + h) ++count;
      }
    }
  }
  return count;
}

void draw_legend(Canvas& canvas, const LinePlot& plot, const Layout& l, double thickness, double marker) {
  const PlotFrame& f = l.frame;
  const int s = l.scale;
  const int row_h = font::k_line_height * s + 2 * s;
  const int swatch = 12 * s;
  int label_w = 0;
  for (const PlotSeries& ps : plot.series) label_w = std::max(label_w, Canvas::text_width(ps.label, s));
  const int w = 5 * s + swatch + 4 * s + label_w + 5 * s;
  const int h = static_cast<int>(plot.series.size()) * row_h + 4 * s;
  const int inset = 5 * s;
  // Corners in order of preference: top-left, top-right, bottom-right, bottom-left.
  const std::array<std::pair<int, int>, 4> corners = {{{f.left + inset, f.top + inset},
                                                       {f.right - inset - w, f.top + inset},
                                                       {f.right - inset - w, f.bottom - inset - h},
                                                       {f.left + inset, f.bottom - inset - h}}};
  auto best = corners[0];
  int best_hits = std::numeric_limits<int>::max();
  for (const auto& c : corners) {
    const int hits = points_inside(plot, f, c.first, c.second, w, h);
    if (hits < best_hits) {
      best_hits = hits;
      best = c;
    }
  }
  const auto [x0, y0] = best;
  canvas.fill_rect(x0, y0, w, h, k_background);
  canvas.rect(x0, y0, w, h, k_legend_edge);
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& ps = plot.series[i];
    const std::uint32_t color = series_color(ps, i);
    const int row_top = y0 + 2 * s + static_cast<int>(i) * row_h;
    const double mid = row_top + row_h / 2.0;
    const double sx0 = x0 + 5 * s;
    canvas.line(sx0, mid, sx0 + swatch, mid, color, thickness);
    canvas.fill_circle(sx0 + swatch / 2.0, mid, marker, color);
    // Centre the capital height (7 rows) on the swatch.
    const int text_top = static_cast<int>(std::lround(mid - 3.5 * s));
    canvas.text(x0 + 5 * s + swatch + 4 * s, text_top, ps.label, k_ink, s);
  }
}

}  // namespace

double PlotFrame::px(double x) const { return left + (x - x_min) / (x_max - x_min) * (right - left) + 0.5; }
double PlotFrame::py(double y) const { return bottom - (y - y_min) / (y_max - y_min) * (bottom - top) + 0.5; }

std::uint32_t default_series_color(std::size_t index) {
  static constexpr std::array<std::uint32_t, 10> palette = {
      0x1F77B4,  // blue
      0xFF7F0E,  // orange
      0x2CA02C,  // green
      0xD62728,  // red
      0x9467BD,  // purple
      0x8C564B,  // brown
      0xE377C2,  // pink
      0x7F7F7F,  // grey
      0xBCBD22,  // olive
      0x17BECF,  // cyan
  };
  return palette[index % palette.size()];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  LOWBIT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "nice_ticks range: expected finite lo < hi, got [",
               lo, ", ", hi, "]");
  LOWBIT_CHECK(target >= 1 && target <= k_max_ticks, "nice_ticks target: expected 1..", k_max_ticks, ", got ",
               target);
  // Of the 1-2-5 steps near (hi - lo) / target, the one whose tick count comes
  // closest to target (ties: the larger step).
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 0.0;
  double best = std::numeric_limits<double>::infinity();
  for (const double m : {0.5, 1.0, 2.0, 5.0, 10.0, 20.0}) {
    const double candidate = m * magnitude;
    const double intervals = std::ceil(hi / candidate) - std::floor(lo / candidate);
    const double miss = std::abs(intervals - target);
    if (miss <= best) {
      best = miss;
      step = candidate;
    }
  }
  for (;;) {
    const double first = std::floor(lo / step);
    const double last = std::ceil(hi / step);
    if (last - first <= k_max_ticks) {
      std::vector<double> ticks;
      for (double k = first; k <= last; k += 1.0) {
        const double t = k * step;  // multiples, not a running sum: no drift
        ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
      }
      return ticks;
    }
    step *= 2.0;  // only when rounding made the count explode
  }
}

std::string format_tick(double value, double step) {
  if (value == 0.0 || !std::isfinite(value)) return value == 0.0 ? "0" : std::to_string(value);
  step = std::abs(step) > 0.0 && std::isfinite(step) ? std::abs(step) : std::abs(value);
  const double magnitude = std::abs(value);
  static constexpr std::array<std::pair<double, const char*>, 4> units = {
      {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}};
  double unit = 1.0;
  const char* suffix = "";
  for (const auto& [u, name] : units) {
    if (magnitude >= u * (1.0 - 1e-9)) {
      unit = u;
      suffix = name;
      break;
    }
  }
  const double scaled_step = step / unit;
  // One digit more than the step needs (a 0.25 step has two); trailing zeros go.
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(scaled_step) - 1e-9)) + 1, 0, 10);
  if (magnitude >= 1e18 || decimals >= 10) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", value);
    return buf;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value / unit);
  std::string text = buf;
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  if (text == "-0") text = "0";
  return text + suffix;
}

PlotFrame line_plot_frame(const LinePlot& plot) { return make_layout(plot).frame; }

Canvas render_line_plot(const LinePlot& plot) {
  const Layout l = make_layout(plot);
  const PlotFrame& f = l.frame;
  const int s = l.scale;
  const int text_h = Canvas::text_height(s);
  const int tick_len = 3 * s;
  Canvas canvas(plot.width, plot.height, k_background);

  // Grid and ticks. Lines sit on pixel centres so that 1-pixel lines stay crisp.
  for (std::size_t i = 0; i < f.x_ticks.size(); ++i) {
    const double x = std::floor(f.px(f.x_ticks[i])) + 0.5;
    if (i > 0 && i + 1 < f.x_ticks.size()) canvas.dashed_line(x, f.top + 0.5, x, f.bottom + 0.5, k_grid, 1.0, 4.0, 3.0);
    canvas.line(x, f.bottom + 0.5, x, f.bottom + 0.5 + tick_len, k_axis, 1.0);
    const std::string label = tick_label(f.x_ticks, i);
    canvas.text(static_cast<int>(x) - Canvas::text_width(label, s) / 2, f.bottom + tick_len + 3 * s, label, k_ink, s);
  }
  for (std::size_t i = 0; i < f.y_ticks.size(); ++i) {
    const double y = std::floor(f.py(f.y_ticks[i])) + 0.5;
    if (i > 0 && i + 1 < f.y_ticks.size()) canvas.dashed_line(f.left + 0.5, y, f.right + 0.5, y, k_grid, 1.0, 4.0, 3.0);
    canvas.line(f.left + 0.5 - tick_len, y, f.left + 0.5, y, k_axis, 1.0);
    const std::string label = tick_label(f.y_ticks, i);
    // Right-aligned; the capital height (7 font rows) centred on the tick.
    canvas.text(f.left - tick_len - 2 * s - Canvas::text_width(label, s), static_cast<int>(std::lround(y - 3.5 * s)),
                label, k_ink, s);
  }
  canvas.rect(f.left, f.top, f.right - f.left + 1, f.bottom - f.top + 1, k_axis);

  // Series: lines, then markers where points are few enough to tell apart.
  const double thickness = 1.25 * s;
  const double marker = 1.5 * s + 0.5;
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& ps = plot.series[i];
    const std::uint32_t color = series_color(ps, i);
    for (std::size_t k = 0; k + 1 < ps.x.size(); ++k)
      canvas.line(f.px(ps.x[k]), f.py(ps.y[k]), f.px(ps.x[k + 1]), f.py(ps.y[k + 1]), color, thickness);
    const double spacing = static_cast<double>(f.right - f.left) / static_cast<double>(ps.x.size());
    if (ps.x.size() == 1 || spacing >= 4.0 * marker) {
      for (std::size_t k = 0; k < ps.x.size(); ++k) canvas.fill_circle(f.px(ps.x[k]), f.py(ps.y[k]), marker, color);
    }
  }

  draw_legend(canvas, plot, l, thickness, marker);

  if (!plot.title.empty()) {
    const int w = Canvas::text_width(plot.title, l.title_scale);
    canvas.text((plot.width - w) / 2, 6 * s, plot.title, k_ink, l.title_scale);
  }
  if (!plot.x_label.empty()) {
    const int w = Canvas::text_width(plot.x_label, s);
    canvas.text((f.left + f.right - w) / 2, plot.height - 6 * s - text_h, plot.x_label, k_ink, s);
  }
  if (!plot.y_label.empty()) {
    const int w = Canvas::text_width(plot.y_label, s);
    canvas.text(6 * s, (f.top + f.bottom + w) / 2, plot.y_label, k_ink, s, TextDirection::up);
  }
  return canvas;
}

void write_line_plot_png(const LinePlot& plot, const std::string& path) {
  const Canvas canvas = render_line_plot(plot);
  write_png(path, canvas.width(), canvas.height(), canvas.pixels());
}

}  // namespace lowbit::report
