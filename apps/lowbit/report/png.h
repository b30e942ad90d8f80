// Minimal PNG writer for RGB8 images: no compression library, the pixel data goes
// into stored (uncompressed) deflate blocks, which every PNG reader accepts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lowbit::report {

// CRC-32 (ISO 3309 / PNG chunk CRC) and Adler-32 (zlib stream trailer).
std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);
std::uint32_t adler32(std::span<const std::uint8_t> bytes, std::uint32_t adler = 1);

// The whole file in memory. rgb holds width * height * 3 bytes, rows top to bottom.
std::vector<std::uint8_t> encode_png(int width, int height, std::span<const std::uint8_t> rgb);

// encode_png, then write it to path; throws lowbit::Error naming path if that fails.
void write_png(const std::string& path, int width, int height, std::span<const std::uint8_t> rgb);

}  // namespace lowbit::report
