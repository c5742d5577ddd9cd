// The PNG encoder, decoded back by hand (zlib's inflate and CRC-32 as the
// independent reference), and the rasterizer's shapes and font.
#include "src/report/png.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "src/report/raster.h"

namespace ladder::report {
namespace {

uint32_t U32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) |
         uint32_t{static_cast<uint8_t>(s[at + 3])};
}

TEST(PngTest, DecodesBackToTheSamePixels) {
  Image image(7, 5);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      const size_t i = (static_cast<size_t>(y) * 7 + x) * 3;
      image.rgb[i] = static_cast<uint8_t>(x * 30);
      image.rgb[i + 1] = static_cast<uint8_t>(y * 50);
      image.rgb[i + 2] = static_cast<uint8_t>((x + y) * 17);
    }
  }
  auto png = EncodePng(image);
  ASSERT_TRUE(png.ok()) << png.status();
  const std::string& s = *png;
  ASSERT_EQ(s.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  std::vector<std::string> types;
  std::string idat, ihdr;
  for (size_t at = 8; at < s.size();) {
    ASSERT_LE(at + 12, s.size());
    const uint32_t length = U32(s, at);
    const std::string type = s.substr(at + 4, 4);
    ASSERT_LE(at + 12 + length, s.size());
    const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(s.data() + at + 4), 4 + length);
    EXPECT_EQ(U32(s, at + 8 + length), crc) << "CRC of chunk " << type;
    types.push_back(type);
    if (type == "IHDR") ihdr = s.substr(at + 8, length);
    if (type == "IDAT") idat += s.substr(at + 8, length);
    at += 12 + length;
  }
  ASSERT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  ASSERT_EQ(ihdr.size(), 13u);
  EXPECT_EQ(U32(ihdr, 0), 7u);
  EXPECT_EQ(U32(ihdr, 4), 5u);
  EXPECT_EQ(ihdr.substr(8), std::string("\x08\x02\x00\x00\x00", 5)) << "8-bit RGB, no interlace";

  std::vector<uint8_t> raw(5 * (1 + 7 * 3));
  uLongf raw_size = raw.size();
  ASSERT_EQ(
      uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
      Z_OK);
  ASSERT_EQ(raw_size, raw.size());
  for (int y = 0; y < 5; ++y) {
    EXPECT_EQ(raw[y * 22], 0) << "filter byte of row " << y;
    EXPECT_EQ(std::memcmp(&raw[y * 22 + 1], &image.rgb[y * 21], 21), 0) << "row " << y;
  }
}

int CountColor(const Image& image, Color c) {
  int n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) n += image.At(x, y) == c;
  }
  return n;
}

TEST(RasterTest, ShapesCoverThePixelsWhoseCentresTheyContain) {
  const Color red(255, 0, 0), blue(0, 0, 255), black(0, 0, 0);
  Image image(40, 20);
  Canvas canvas(&image);
  canvas.FillRect(2, 3, 6, 8, red);  // 4 x 5 pixels
  EXPECT_EQ(CountColor(image, red), 20);
  canvas.FillRect(-10, -10, 1, 1, red);  // clipped to pixel (0, 0)
  EXPECT_EQ(CountColor(image, red), 21);
  // A right triangle with legs of 10: about half of 100 pixels.
  canvas.FillPolygon({{20, 0}, {30, 0}, {20, 10}}, blue);
  const int blue_pixels = CountColor(image, blue);
  EXPECT_GE(blue_pixels, 45);
  EXPECT_LE(blue_pixels, 55);
  // A horizontal line 1 pixel wide from x = 0 to 39 at y = 15.
  canvas.DrawPolyline({{0, 15.5}, {39.5, 15.5}}, black, 1, false);
  EXPECT_EQ(CountColor(image, black), 40);
}

TEST(RasterTest, TextUsesTheBitmapFontAndLowerCaseAsUpper) {
  const Color ink(0, 0, 0);
  Image upper(12, 10), lower(12, 10);
  Canvas(&upper).DrawText(0, 5, "H", ink, 1, Shape::Align::kLeft);
  Canvas(&lower).DrawText(0, 5, "h", ink, 1, Shape::Align::kLeft);
  EXPECT_EQ(upper.rgb, lower.rgb);
  // H: two columns of 7 and a bar of 3 between them.
  EXPECT_EQ(CountColor(upper, ink), 17);
  Image big(24, 20);
  Canvas(&big).DrawText(12, 10, "H", ink, 2, Shape::Align::kCenter);
  EXPECT_EQ(CountColor(big, ink), 17 * 4);
}

}  // namespace
}  // namespace ladder::report
