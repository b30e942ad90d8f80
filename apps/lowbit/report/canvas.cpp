#include "report/canvas.h"

#include <algorithm>
#include <cmath>

#include "lowbit/error.h"
#include "report/font.h"

namespace lowbit::report {
namespace {

constexpr int k_max_side = 1 << 15;

double clamp01(double v) { return std::clamp(v, 0.0, 1.0); }

}  // namespace

Canvas::Canvas(int width, int height, std::uint32_t background) : width_(width), height_(height) {
  LOWBIT_CHECK(width > 0 && width <= k_max_side, "canvas width: expected 1..", k_max_side, ", got ", width);
  LOWBIT_CHECK(height > 0 && height <= k_max_side, "canvas height: expected 1..", k_max_side, ", got ", height);
  pixels_.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  fill(background);
}

std::uint32_t Canvas::pixel(int x, int y) const {
  LOWBIT_CHECK(x >= 0 && x < width_ && y >= 0 && y < height_, "canvas pixel: (", x, ", ", y,
               ") is outside the ", width_, "x", height_, " canvas");
  const std::size_t at = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  return rgb(pixels_[at], pixels_[at + 1], pixels_[at + 2]);
}

void Canvas::fill(std::uint32_t color) {
  for (std::size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = static_cast<std::uint8_t>(color >> 16);
    pixels_[i + 1] = static_cast<std::uint8_t>(color >> 8);
    pixels_[i + 2] = static_cast<std::uint8_t>(color);
  }
}

void Canvas::set_pixel(int x, int y, std::uint32_t color) { blend_pixel(x, y, color, 1.0); }

void Canvas::blend_pixel(int x, int y, std::uint32_t color, double coverage) {
  if (x < 0 || x >= width_ || y < 0 || y >= height_ || !(coverage > 0.0)) return;
  const double a = std::min(coverage, 1.0);
  const std::size_t at = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  for (int ch = 0; ch < 3; ++ch) {
    const double src = static_cast<double>((color >> (16 - 8 * ch)) & 0xFFu);
    const double dst = pixels_[at + static_cast<std::size_t>(ch)];
    pixels_[at + static_cast<std::size_t>(ch)] = static_cast<std::uint8_t>(std::lround(dst + (src - dst) * a));
  }
}

void Canvas::capsule(double x0, double y0, double x1, double y1, double r, std::uint32_t color) {
  if (!(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1) && r > 0.0)) return;
  const double pad = r + 1.0;
  const int xa = std::max(0, static_cast<int>(std::floor(std::min(x0, x1) - pad)));
  const int xb = std::min(width_ - 1, static_cast<int>(std::ceil(std::max(x0, x1) + pad)));
  const int ya = std::max(0, static_cast<int>(std::floor(std::min(y0, y1) - pad)));
  const int yb = std::min(height_ - 1, static_cast<int>(std::ceil(std::max(y0, y1) + pad)));
  const double dx = x1 - x0;
  const double dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  for (int y = ya; y <= yb; ++y) {
    for (int x = xa; x <= xb; ++x) {
      const double px = x + 0.5 - x0;
      const double py = y + 0.5 - y0;
      const double t = len2 > 0.0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
      const double d = std::hypot(px - t * dx, py - t * dy);
      // With anti-aliasing, coverage ramps over one pixel across the edge.
      const double coverage = antialias_ ? clamp01(r + 0.5 - d) : (d <= r ? 1.0 : 0.0);
      blend_pixel(x, y, color, coverage);
    }
  }
}

void Canvas::line(double x0, double y0, double x1, double y1, std::uint32_t color, double thickness) {
  capsule(x0, y0, x1, y1, std::max(thickness, 0.0) / 2.0, color);
}

void Canvas::dashed_line(double x0, double y0, double x1, double y1, std::uint32_t color, double thickness,
                         double dash, double gap) {
  LOWBIT_CHECK(dash > 0.0 && gap >= 0.0, "dashed_line dash/gap: expected dash > 0 and gap >= 0, got ", dash, "/",
               gap);
  const double length = std::hypot(x1 - x0, y1 - y0);
  if (!(length > 0.0)) return line(x0, y0, x1, y1, color, thickness);
  const double ux = (x1 - x0) / length;
  const double uy = (y1 - y0) / length;
  // Round caps would fill the gaps of thin dashes: shorten each dash by its cap.
  const double cap = std::min(thickness / 2.0, dash / 2.0);
  for (double s = 0.0; s < length; s += dash + gap) {
    const double e = std::min(s + dash, length);
    const double a = std::min(s + cap, e);
    const double b = std::max(e - cap, a);
    line(x0 + ux * a, y0 + uy * a, x0 + ux * b, y0 + uy * b, color, thickness);
  }
}

void Canvas::fill_rect(int x, int y, int w, int h, std::uint32_t color) {
  const int xa = std::max(0, x);
  const int ya = std::max(0, y);
  const int xb = std::min(width_, x + std::max(w, 0));
  const int yb = std::min(height_, y + std::max(h, 0));
  for (int yy = ya; yy < yb; ++yy)
    for (int xx = xa; xx < xb; ++xx) set_pixel(xx, yy, color);
}

void Canvas::rect(int x, int y, int w, int h, std::uint32_t color, int thickness) {
  const int t = std::max(1, std::min({thickness, (w + 1) / 2, (h + 1) / 2}));
  fill_rect(x, y, w, t, color);
  fill_rect(x, y + h - t, w, t, color);
  fill_rect(x, y, t, h, color);
  fill_rect(x + w - t, y, t, h, color);
}

void Canvas::fill_circle(double cx, double cy, double radius, std::uint32_t color) {
  capsule(cx, cy, cx, cy, radius, color);
}

void Canvas::text(int x, int y, std::string_view s, std::uint32_t color, int scale, TextDirection direction) {
  LOWBIT_CHECK(scale >= 1 && scale <= 64, "text scale: expected 1..64, got ", scale);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const int pen = static_cast<int>(i) * font::k_advance;  // font pixels along the text
    for (int row = 0; row < font::k_glyph_height; ++row) {
      const std::uint8_t bits = font::glyph_row(s[i], row);
      for (int col = 0; col < font::k_glyph_width; ++col) {
        if (!((bits >> (font::k_glyph_width - 1 - col)) & 1u)) continue;
        const int u = pen + col;  // along the reading direction
        if (direction == TextDirection::horizontal) {
          fill_rect(x + u * scale, y + row * scale, scale, scale, color);
        } else {
          // Rotated counter-clockwise: reading runs up, glyph tops face left.
          fill_rect(x + row * scale, y - (u + 1) * scale, scale, scale, color);
        }
      }
    }
  }
}

int Canvas::text_width(std::string_view s, int scale) {
  if (s.empty()) return 0;
  return (static_cast<int>(s.size()) * font::k_advance - (font::k_advance - font::k_glyph_width)) * scale;
}

int Canvas::text_height(int scale) { return font::k_glyph_height * scale; }

}  // namespace lowbit::report
