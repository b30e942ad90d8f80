// PNG writer, canvas and line plots. Files are read back by a small PNG reader of
// the test's own (bitwise CRC-32, byte-at-a-time Adler-32, stored-block inflate),
// independent of the writer's tables, and their pixels checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "report/canvas.h"
#include "report/line_plot.h"
#include "report/png.h"

namespace lowbit::report {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// ---- the test's own PNG reader --------------------------------------------------

std::uint32_t bitwise_crc32(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::uint32_t slow_adler32(const Bytes& data) {
  std::uint32_t a = 1, b = 0;
  for (const std::uint8_t v : data) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::uint32_t be32(const Bytes& d, std::size_t at) {
  return (std::uint32_t{d[at]} << 24) | (std::uint32_t{d[at + 1]} << 16) | (std::uint32_t{d[at + 2]} << 8) | d[at + 3];
}

struct Chunk {
  std::string type;
  Bytes data;
  std::uint32_t crc = 0;
};

struct Decoded {
  int width = 0, height = 0;
  std::vector<Chunk> chunks;
  std::size_t stored_blocks = 0;
  Bytes rgb;
  std::uint32_t at(int x, int y) const {
    const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 3;
    return report::rgb(rgb[i], rgb[i + 1], rgb[i + 2]);
  }
};

// Fails the current test (ADD_FAILURE) and returns what it could on malformed input.
Decoded decode(const Bytes& file) {
  Decoded out;
  const Bytes signature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (file.size() < 8 || !std::equal(signature.begin(), signature.end(), file.begin())) {
    ADD_FAILURE() << "bad PNG signature";
    return out;
  }
  std::size_t at = 8;
  while (at + 12 <= file.size()) {
    const std::uint32_t len = be32(file, at);
    if (at + 12 + len > file.size()) {
      ADD_FAILURE() << "chunk runs past the end of the file";
      return out;
    }
    Chunk c;
    c.type.assign(file.begin() + static_cast<std::ptrdiff_t>(at + 4), file.begin() + static_cast<std::ptrdiff_t>(at + 8));
    c.data.assign(file.begin() + static_cast<std::ptrdiff_t>(at + 8),
                  file.begin() + static_cast<std::ptrdiff_t>(at + 8 + len));
    c.crc = be32(file, at + 8 + len);
    EXPECT_EQ(c.crc, bitwise_crc32(file.data() + at + 4, 4 + len)) << "CRC of chunk " << c.type;
    out.chunks.push_back(c);
    at += 12 + len;
  }
  EXPECT_EQ(at, file.size()) << "bytes after the last chunk";
  if (out.chunks.size() < 3 || out.chunks.front().type != "IHDR" || out.chunks.back().type != "IEND") {
    ADD_FAILURE() << "expected IHDR ... IEND";
    return out;
  }
  const Bytes& ihdr = out.chunks.front().data;
  EXPECT_EQ(ihdr.size(), 13u);
  out.width = static_cast<int>(be32(ihdr, 0));
  out.height = static_cast<int>(be32(ihdr, 4));
  EXPECT_EQ(ihdr[8], 8) << "bit depth";
  EXPECT_EQ(ihdr[9], 2) << "colour type RGB";
  EXPECT_EQ(ihdr[10] | ihdr[11] | ihdr[12], 0) << "compression, filter, interlace";
  EXPECT_TRUE(out.chunks.back().data.empty());

  Bytes z;
  for (const Chunk& c : out.chunks)
    if (c.type == "IDAT") z.insert(z.end(), c.data.begin(), c.data.end());
  if (z.size() < 6) {
    ADD_FAILURE() << "zlib stream too short";
    return out;
  }
  EXPECT_EQ(z[0] & 0x0F, 8) << "zlib method deflate";
  EXPECT_LE(z[0] >> 4, 7) << "zlib window";
  EXPECT_EQ((z[0] * 256 + z[1]) % 31, 0) << "zlib header check bits";
  EXPECT_EQ(z[1] & 0x20, 0) << "no preset dictionary";

  Bytes raw;
  std::size_t p = 2;
  for (bool final = false; !final;) {
    if (p + 5 > z.size()) {
      ADD_FAILURE() << "truncated deflate block header";
      return out;
    }
    final = (z[p] & 1) != 0;
    if (((z[p] >> 1) & 3) != 0) {
      ADD_FAILURE() << "only stored blocks are expected";
      return out;
    }
    const unsigned len = z[p + 1] | (z[p + 2] << 8);
    const unsigned nlen = z[p + 3] | (z[p + 4] << 8);
    EXPECT_EQ(len ^ 0xFFFFu, nlen) << "NLEN is not the complement of LEN";
    p += 5;
    if (p + len > z.size()) {
      ADD_FAILURE() << "stored block runs past the stream";
      return out;
    }
    raw.insert(raw.end(), z.begin() + static_cast<std::ptrdiff_t>(p), z.begin() + static_cast<std::ptrdiff_t>(p + len));
    p += len;
    ++out.stored_blocks;
  }
  EXPECT_EQ(p + 4, z.size()) << "Adler-32 should end the zlib stream";
  if (p + 4 <= z.size()) {
    EXPECT_EQ(be32(z, p), slow_adler32(raw)) << "Adler-32";
  }

  const std::size_t stride = static_cast<std::size_t>(out.width) * 3 + 1;
  if (raw.size() != stride * static_cast<std::size_t>(out.height)) {
    ADD_FAILURE() << "inflated " << raw.size() << " bytes, expected " << stride * static_cast<std::size_t>(out.height);
    return out;
  }
  for (int y = 0; y < out.height; ++y) {
    const std::size_t row = static_cast<std::size_t>(y) * stride;
    EXPECT_EQ(raw[row], 0) << "filter byte of row " << y;
    out.rgb.insert(out.rgb.end(), raw.begin() + static_cast<std::ptrdiff_t>(row + 1),
                   raw.begin() + static_cast<std::ptrdiff_t>(row + stride));
  }
  return out;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

fs::path temp_png(const std::string& name) {
  return fs::temp_directory_path() / ("lowbit_png_plot_test_" + name + ".png");
}

// ---- PNG writer ------------------------------------------------------------------

TEST(Png, ChecksumsMatchKnownValues) {
  // Standard check values: CRC-32("123456789") and Adler-32("Wikipedia").
  const std::string digits = "123456789";
  EXPECT_EQ(crc32({reinterpret_cast<const std::uint8_t*>(digits.data()), digits.size()}), 0xCBF43926u);
  const std::string wiki = "Wikipedia";
  EXPECT_EQ(adler32({reinterpret_cast<const std::uint8_t*>(wiki.data()), wiki.size()}), 0x11E60398u);
}

TEST(Png, OnePixelFileHasTheKnownIhdrCrc) {
  const Bytes file = encode_png(1, 1, Bytes{0x12, 0x34, 0x56});
  const Decoded d = decode(file);
  ASSERT_EQ(d.chunks.size(), 3u);
  // CRC-32 over "IHDR" 00000001 00000001 08 02 00 00 00, the IHDR of every 1x1 RGB8
  // PNG; computed independently with Python's zlib.crc32. IEND's CRC is fixed too.
  EXPECT_EQ(d.chunks[0].crc, 0x907753DEu);
  EXPECT_EQ(d.chunks[2].crc, 0xAE426082u);
  EXPECT_EQ(d.width, 1);
  EXPECT_EQ(d.height, 1);
  EXPECT_EQ(d.at(0, 0), 0x123456u);
}

TEST(Png, LargeImageSplitsIntoStoredBlocksAndRoundTrips) {
  const int w = 300, h = 200;  // 180,200 raw bytes: three stored blocks
  Bytes rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 31 + i / 7);
  const fs::path path = temp_png("roundtrip");
  write_png(path.string(), w, h, rgb);
  const Decoded d = decode(read_file(path));
  EXPECT_EQ(d.width, w);
  EXPECT_EQ(d.height, h);
  EXPECT_EQ(d.stored_blocks, 3u);
  EXPECT_EQ(d.rgb, rgb);
  fs::remove(path);
}

TEST(Png, BadArgumentsAndUnwritablePathThrow) {
  EXPECT_LOWBIT_ERROR(encode_png(0, 1, Bytes{}), "png width: expected 1..");
  EXPECT_LOWBIT_ERROR(encode_png(2, -1, Bytes{}), "png height: expected 1..");
  EXPECT_LOWBIT_ERROR(encode_png(2, 2, Bytes(11)), "png rgb: expected width * height * 3 = 12 bytes, got 11");
  const std::string path = "/nonexistent_lowbit_dir/sub/plot.png";
  EXPECT_LOWBIT_ERROR(write_png(path, 1, 1, Bytes{0, 0, 0}),
                      "output file: the directory '/nonexistent_lowbit_dir/sub' of '" + path + "' does not exist");
  EXPECT_LOWBIT_ERROR(write_png("/dev/full", 1, 1, Bytes{0, 0, 0}), "writing '/dev/full' failed: No space left");
}

// ---- canvas ---------------------------------------------------------------------

TEST(Canvas, PrimitivesPaintWhereExpected) {
  Canvas c(60, 40, 0xFFFFFF);
  c.line(5, 10.5, 55, 10.5, 0xFF0000, 3.0);
  EXPECT_EQ(c.pixel(30, 10), 0xFF0000u);  // centre row
  EXPECT_EQ(c.pixel(30, 9), 0xFF0000u);   // within 1.5 px of the centre line
  EXPECT_EQ(c.pixel(30, 13), 0xFFFFFFu);
  c.fill_circle(30.5, 30.5, 4.0, 0x00FF00);
  EXPECT_EQ(c.pixel(30, 30), 0x00FF00u);
  EXPECT_EQ(c.pixel(30, 35), 0xFFFFFFu);
  c.rect(0, 0, 60, 40, 0x0000FF);
  EXPECT_EQ(c.pixel(0, 0), 0x0000FFu);
  EXPECT_EQ(c.pixel(59, 39), 0x0000FFu);
  EXPECT_EQ(c.pixel(1, 1), 0xFFFFFFu);
  // Drawing off the canvas is clipped, not an error.
  c.line(-100, -100, 500, -50, 0x000000, 5.0);
  c.fill_circle(1000, 1000, 3, 0x000000);
}

TEST(Canvas, WithoutAntialiasingOnlyExactColours) {
  Canvas c(40, 40, 0xFFFFFF);
  c.set_antialias(false);
  c.line(3, 4, 37, 33, 0x1F77B4, 2.5);
  c.fill_circle(20, 20, 6.3, 0xFF7F0E);
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 40; ++x) {
      const std::uint32_t p = c.pixel(x, y);
      EXPECT_TRUE(p == 0xFFFFFFu || p == 0x1F77B4u || p == 0xFF7F0Eu) << x << "," << y;
    }
}

TEST(Canvas, DashedLineHasGaps) {
  Canvas c(100, 5, 0xFFFFFF);
  c.dashed_line(0.0, 2.5, 100.0, 2.5, 0x000000, 1.0, 4.0, 4.0);
  int ink = 0;
  for (int x = 0; x < 100; ++x) ink += c.pixel(x, 2) != 0xFFFFFFu;
  EXPECT_GT(ink, 30);
  EXPECT_LT(ink, 70);
  EXPECT_EQ(c.pixel(6, 2), 0xFFFFFFu);  // in the first gap [4, 8)
}

TEST(Canvas, TextUsesTheBitmapFont) {
  Canvas c(40, 20, 0xFFFFFF);
  c.text(1, 1, "T", 0x000000, 2);
  // 'T': the top row is five pixels wide, then a one-pixel stem in the middle column.
  for (int x = 1; x < 11; ++x) EXPECT_EQ(c.pixel(x, 1), 0u) << x;
  EXPECT_EQ(c.pixel(5, 8), 0u);
  EXPECT_EQ(c.pixel(1, 8), 0xFFFFFFu);
  EXPECT_EQ(Canvas::text_width("abc", 2), (3 * 6 - 1) * 2);
  EXPECT_EQ(Canvas::text_height(3), 24);
  // Rotated: the top row of 'T' becomes a column, running up from the anchor.
  Canvas r(20, 20, 0xFFFFFF);
  r.text(2, 15, "T", 0x000000, 1, TextDirection::up);
  for (int y = 10; y < 15; ++y) EXPECT_EQ(r.pixel(2, y), 0u) << y;
  EXPECT_EQ(r.pixel(2, 15), 0xFFFFFFu);
  EXPECT_LOWBIT_ERROR(c.text(0, 0, "x", 0, 0), "text scale: expected 1..64, got 0");
}

// ---- ticks and labels --------------------------------------------------------------

TEST(LinePlotTicks, NiceStepsCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  const std::vector<double> t = nice_ticks(3, 1'234'567, 6);
  EXPECT_EQ(t.front(), 0.0);
  EXPECT_EQ(t[1], 200'000.0);
  EXPECT_EQ(t.back(), 1'400'000.0);
  const std::vector<double> n = nice_ticks(-7.5, 2, 4);
  EXPECT_EQ(n, (std::vector<double>{-10, -5, 0, 5}));
}

TEST(LinePlotTicks, CompactLabels) {
  EXPECT_EQ(format_tick(1'500'000, 500'000), "1.5M");
  EXPECT_EQ(format_tick(200'000, 200'000), "200k");
  EXPECT_EQ(format_tick(1'250'000, 250'000), "1.25M");
  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(format_tick(0, 0.2), "0");
  EXPECT_EQ(format_tick(-3, 1), "-3");
  EXPECT_EQ(format_tick(512, 128), "512");
  EXPECT_EQ(format_tick(4096, 1024), "4.1k");  // two significant steps: 1k, 2k, 3k, 4.1k
  EXPECT_EQ(format_tick(3e9, 1e9), "3G");
  EXPECT_EQ(format_tick(2e12, 1e12), "2T");
}

// ---- line plots --------------------------------------------------------------------

LinePlot sample_plot() {
  LinePlot p;
  p.title = "KV-cache memory vs generated tokens";
  p.x_label = "generated tokens";
  p.y_label = "KV-cache memory (bytes)";
  PlotSeries fp16{"fp16", {}, {}, 0};
  PlotSeries int8{"int8", {}, {}, 0};
  PlotSeries int4{"int4 + fp16 window", {}, {}, 0};
  for (int t = 0; t <= 4096; t += 256) {
    fp16.x.push_back(t);
    fp16.y.push_back(t * 256.0);
    int8.x.push_back(t);
    int8.y.push_back(t * 128.0 + 4096);
    int4.x.push_back(t);
    int4.y.push_back(std::min(t, 512) * 256.0 + std::max(t - 512, 0) * 64.0);
  }
  p.series = {fp16, int8, int4};
  return p;
}

TEST(LinePlot, SamplePlotRoundTripsAndLinesHaveTheirColours) {
  const LinePlot plot = sample_plot();
  const fs::path path = temp_png("sample");
  write_line_plot_png(plot, path.string());
  const Decoded d = decode(read_file(path));
  ASSERT_EQ(d.width, plot.width);
  ASSERT_EQ(d.height, plot.height);
  ASSERT_EQ(d.rgb.size(), static_cast<std::size_t>(plot.width) * plot.height * 3);

  const PlotFrame f = line_plot_frame(plot);
  EXPECT_EQ(f.x_min, 0.0);
  EXPECT_GE(f.x_max, 4096.0);
  EXPECT_EQ(f.y_min, 0.0);
  EXPECT_GE(f.y_max, 4096 * 256.0);
  // Midway along fp16's last segment (blue, default palette entry 0): the pixel
  // under the line's centre is drawn in the series colour.
  const double mx = (3840 + 4096) / 2.0;
  const int px = static_cast<int>(std::floor(f.px(mx)));
  const int py = static_cast<int>(std::floor(f.py(mx * 256.0)));
  EXPECT_EQ(d.at(px, py), default_series_color(0));
  // int8 (orange): on its segment near the middle of the x range.
  const double ox = (2048 + 2304) / 2.0;
  EXPECT_EQ(d.at(static_cast<int>(std::floor(f.px(ox))), static_cast<int>(std::floor(f.py(ox * 128.0 + 4096)))),
            default_series_color(1));
  // Background: the middle of the grid cell under the lowest-right one, far from any line.
  const double cx = (f.x_ticks[f.x_ticks.size() - 2] + f.x_ticks.back()) / 2.0;
  const double cy = (f.y_ticks[2] + f.y_ticks[3]) / 2.0;
  EXPECT_EQ(d.at(static_cast<int>(std::floor(f.px(cx))), static_cast<int>(std::floor(f.py(cy)))), 0xFFFFFFu);
  // Around the picture's corners, outside the plot area: background.
  EXPECT_EQ(d.at(0, 0), 0xFFFFFFu);
  EXPECT_EQ(d.at(plot.width - 1, plot.height - 1), 0xFFFFFFu);
  // The legend writes its labels in dark ink somewhere, and the whole picture uses
  // each series' colour.
  int seen[3] = {0, 0, 0};
  for (int y = 0; y < d.height; ++y)
    for (int x = 0; x < d.width; ++x)
      for (int s = 0; s < 3; ++s) seen[s] += d.at(x, y) == default_series_color(static_cast<std::size_t>(s));
  for (int s = 0; s < 3; ++s) EXPECT_GT(seen[s], 200) << "series " << s;
  fs::remove(path);
}

TEST(LinePlot, ExplicitColourIsUsed) {
  LinePlot plot;
  plot.series = {{"flat", {0, 10}, {5, 5}, 0x00AA00}};  // equal y: a flat line mid-axis
  const Canvas c = render_line_plot(plot);
  const PlotFrame f = line_plot_frame(plot);
  EXPECT_LT(f.y_min, 5.0);
  EXPECT_GT(f.y_max, 5.0);
  EXPECT_EQ(c.pixel(static_cast<int>(f.px(5)), static_cast<int>(f.py(5))), 0x00AA00u);
}

TEST(LinePlot, SinglePointDrawsAMarker) {
  LinePlot plot;
  plot.series = {{"one", {3}, {7}, 0}};
  const Canvas c = render_line_plot(plot);
  const PlotFrame f = line_plot_frame(plot);
  EXPECT_LT(f.x_min, 3.0);
  EXPECT_GT(f.x_max, 3.0);
  EXPECT_EQ(c.pixel(static_cast<int>(f.px(3)), static_cast<int>(f.py(7))), default_series_color(0));
}

TEST(LinePlot, BadInputsThrowNamingTheProblem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  LinePlot plot;
  EXPECT_LOWBIT_ERROR(write_line_plot_png(plot, temp_png("bad").string()), "plot series: expected at least one series");
  plot.series = {{"ok", {1, 2}, {1, 2}, 0}, {"empty one", {}, {}, 0}};
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "series 'empty one' (#1): expected at least one point");
  plot.series = {{"lengths", {1, 2, 3}, {1, 2}, 0}};
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "series 'lengths' (#0): x has 3 values but y has 2");
  plot.series = {{"has nan", {1, 2}, {1, nan}, 0}};
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "series 'has nan' (#0): y[1] is nan; expected finite values");
  plot.series = {{"has inf", {inf, 2}, {1, 2}, 0}};
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "series 'has inf' (#0): x[0] is inf; expected finite values");
  plot.series = {{"huge", {0, 1}, {-1.7e308, 1.7e308}, 0}};
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "plot y values: range");
  plot.series = {{"ok", {1, 2}, {1, 2}, 0}};
  plot.width = 10;
  EXPECT_LOWBIT_ERROR(render_line_plot(plot), "plot width: expected 240..8192 pixels, got 10");
  plot.width = 900;
  const std::string path = "/nonexistent_lowbit_dir/plot.png";
  EXPECT_LOWBIT_ERROR(write_line_plot_png(plot, path), "of '" + path + "' does not exist");
}

}  // namespace
}  // namespace lowbit::report
