// An RGB8 raster canvas with the few primitives charts need: fills, thick lines
// (optionally anti-aliased), dashed lines, rectangles, filled circles and bitmap text.
// Coordinates are in pixels, y down; pixel (x, y) covers [x, x+1) x [y, y+1), so
// its centre is (x + 0.5, y + 0.5). Drawing outside the canvas is clipped.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace lowbit::report {

// Colours are 0xRRGGBB.
constexpr std::uint32_t rgb(std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  return (std::uint32_t{r} << 16) | (std::uint32_t{g} << 8) | b;
}

enum class TextDirection { horizontal, up };  // up: rotated 90 degrees, reads bottom to top

class Canvas {
 public:
  Canvas(int width, int height, std::uint32_t background = 0xFFFFFF);

  int width() const { return width_; }
  int height() const { return height_; }
  std::span<const std::uint8_t> pixels() const { return pixels_; }  // rows top to bottom, RGB
  std::uint32_t pixel(int x, int y) const;                          // 0xRRGGBB; x, y must be inside

  // Anti-aliasing (on by default) softens edges of lines and circles; text and
  // rectangles are always pixel-exact.
  void set_antialias(bool on) { antialias_ = on; }

  void fill(std::uint32_t color);
  void set_pixel(int x, int y, std::uint32_t color);
  void blend_pixel(int x, int y, std::uint32_t color, double coverage);  // coverage in [0, 1]

  // Segment with round caps, `thickness` pixels wide.
  void line(double x0, double y0, double x1, double y1, std::uint32_t color, double thickness = 1.0);
  void dashed_line(double x0, double y0, double x1, double y1, std::uint32_t color, double thickness = 1.0,
                   double dash = 4.0, double gap = 4.0);
  void fill_rect(int x, int y, int w, int h, std::uint32_t color);
  void rect(int x, int y, int w, int h, std::uint32_t color, int thickness = 1);  // outline, inside the box
  void fill_circle(double cx, double cy, double radius, std::uint32_t color);

  // Text whose top-left corner (before rotation) is (x, y); each font pixel becomes a
  // scale x scale block. For TextDirection::up, (x, y) is the bottom-left corner of
  // the rotated box: the text starts there and runs upwards.
  void text(int x, int y, std::string_view s, std::uint32_t color, int scale = 1,
            TextDirection direction = TextDirection::horizontal);
  static int text_width(std::string_view s, int scale = 1);  // along the reading direction
  static int text_height(int scale = 1);                     // glyph rows incl. descender

 private:
  // Paints pixels whose centre lies within distance r of the segment.
  void capsule(double x0, double y0, double x1, double y1, double r, std::uint32_t color);

  int width_;
  int height_;
  bool antialias_ = true;
  std::vector<std::uint8_t> pixels_;
};

}  // namespace lowbit::report
