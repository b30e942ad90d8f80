#include "report/png.h"

#include <algorithm>
#include <array>

#include "core/file_io.h"
#include "lowbit/error.h"

namespace lowbit::report {
namespace {

constexpr std::size_t k_max_stored_block = 65535;  // LEN is 16 bits in a stored block
constexpr std::int64_t k_max_side = 1 << 16;        // keeps every size well inside 32 bits

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

void put_u32_be(std::vector<std::uint8_t>& out, std::uint32_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 24));
  out.push_back(static_cast<std::uint8_t>(v >> 16));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

// length, type, data, CRC over type + data.
void put_chunk(std::vector<std::uint8_t>& out, const char (&type)[5], std::span<const std::uint8_t> data) {
  put_u32_be(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32_be(out, crc32(std::span(out).subspan(type_at)));
}

}  // namespace

std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  static const std::array<std::uint32_t, 256> table = make_crc_table();
  std::uint32_t c = crc ^ 0xFFFFFFFFu;
  for (const std::uint8_t b : bytes) c = table[(c ^ b) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t adler32(std::span<const std::uint8_t> bytes, std::uint32_t adler) {
  constexpr std::uint32_t mod = 65521;
  std::uint32_t a = adler & 0xFFFFu;
  std::uint32_t b = adler >> 16;
  // 5552 bytes is the longest run whose sums cannot overflow 32 bits before the reduction.
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t end = std::min(bytes.size(), i + 5552);
    for (; i < end; ++i) {
      a += bytes[i];
      b += a;
    }
    a %= mod;
    b %= mod;
  }
  return (b << 16) | a;
}

std::vector<std::uint8_t> encode_png(int width, int height, std::span<const std::uint8_t> rgb) {
  LOWBIT_CHECK(width > 0 && width <= k_max_side, "png width: expected 1..", k_max_side, ", got ", width);
  LOWBIT_CHECK(height > 0 && height <= k_max_side, "png height: expected 1..", k_max_side, ", got ", height);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * 3;
  const std::size_t expected = row_bytes * static_cast<std::size_t>(height);
  LOWBIT_CHECK(rgb.size() == expected, "png rgb: expected width * height * 3 = ", expected, " bytes, got ",
               rgb.size());

  // Raw scanlines: filter type 0 (None) before each row.
  std::vector<std::uint8_t> raw;
  raw.reserve(expected + static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto row = rgb.subspan(static_cast<std::size_t>(y) * row_bytes, row_bytes);
    raw.insert(raw.end(), row.begin(), row.end());
  }

  // zlib stream: header (deflate, 32K window, no dictionary; 0x7801 % 31 == 0),
  // stored blocks of at most 65535 bytes, Adler-32 of the raw data, big-endian.
  std::vector<std::uint8_t> zlib{0x78, 0x01};
  zlib.reserve(raw.size() + raw.size() / k_max_stored_block * 5 + 16);
  for (std::size_t at = 0; at < raw.size();) {
    const std::size_t len = std::min(k_max_stored_block, raw.size() - at);
    const bool last = at + len == raw.size();
    zlib.push_back(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored); the rest of the byte is padding
    const auto len16 = static_cast<std::uint16_t>(len);
    const auto nlen16 = static_cast<std::uint16_t>(~len16);
    zlib.push_back(static_cast<std::uint8_t>(len16));  // LEN and NLEN are little-endian
    zlib.push_back(static_cast<std::uint8_t>(len16 >> 8));
    zlib.push_back(static_cast<std::uint8_t>(nlen16));
    zlib.push_back(static_cast<std::uint8_t>(nlen16 >> 8));
    zlib.insert(zlib.end(), raw.begin() + static_cast<std::ptrdiff_t>(at),
                raw.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  put_u32_be(zlib, adler32(raw));

  std::vector<std::uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<std::uint8_t> ihdr;
  put_u32_be(ihdr, static_cast<std::uint32_t>(width));
  put_u32_be(ihdr, static_cast<std::uint32_t>(height));
  // bit depth 8, colour type 2 (RGB), compression 0, filter method 0, no interlace.
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  put_chunk(png, "IHDR", ihdr);
  // One IDAT chunk is fine: a chunk may hold up to 2^31 - 1 bytes.
  LOWBIT_CHECK(zlib.size() < (std::size_t{1} << 31), "png: image data of ", zlib.size(),
               " bytes does not fit one IDAT chunk");
  put_chunk(png, "IDAT", zlib);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png(const std::string& path, int width, int height, std::span<const std::uint8_t> rgb) {
  const std::vector<std::uint8_t> bytes = encode_png(width, height, rgb);
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace lowbit::report
