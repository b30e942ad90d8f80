// A small built-in bitmap font: 5x8-pixel glyphs (7 rows above the baseline, one
// descender row) for printable ASCII 32..126, drawn for lowbit's own charts.
#pragma once

#include <cstdint>

namespace lowbit::report::font {

inline constexpr int k_glyph_width = 5;
inline constexpr int k_glyph_height = 8;
inline constexpr int k_advance = 6;      // glyph width + one column of spacing
inline constexpr int k_line_height = 10;  // glyph height + two rows of spacing

// Row r (0 = top) of the glyph for c as 5 bits, bit 4 = leftmost column.
// Characters outside 32..126 draw as '?'.
std::uint8_t glyph_row(char c, int row);

}  // namespace lowbit::report::font
