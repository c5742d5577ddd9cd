#include "src/tokenizer/byte_unicode.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ladder {
namespace {

TEST(ByteUnicodeTest, TableFacts) {
  std::set<char32_t> seen;
  int moved = 0;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = ByteToCodePoint(static_cast<uint8_t>(b));
    seen.insert(c);
    EXPECT_EQ(CodePointToByte(c), b);
    if (c != static_cast<char32_t>(b)) {
      ++moved;
      EXPECT_GE(c, 0x100u);
      EXPECT_LE(c, 0x143u);
    }
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(moved, 68);
  EXPECT_EQ(ByteToCodePoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteToCodePoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToCodePoint(0), 0x100u);     // 'Ā'
  EXPECT_EQ(ByteToCodePoint(0x7F), 0x121u);  // DEL follows the 33 below '!'
  EXPECT_EQ(ByteToCodePoint(0xAD), 0x143u);  // soft hyphen, the last one moved
  EXPECT_EQ(ByteToCodePoint('!'), static_cast<char32_t>('!'));
  EXPECT_EQ(ByteToCodePoint(0xE9), 0xE9u);   // 'é' stands for itself
  EXPECT_EQ(CodePointToByte(0x144), -1);
  EXPECT_EQ(CodePointToByte(0x20AC), -1);
}

TEST(ByteUnicodeTest, SymbolsRoundTrip) {
  EXPECT_EQ(BytesToSymbols(" the"), "\xC4\xA0the");  // "Ġthe"
  EXPECT_EQ(BytesToSymbols("\n"), "\xC4\x8A");       // "Ċ"
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string symbols = BytesToSymbols(all);
  EXPECT_EQ(SymbolsToBytes(symbols), all);
  EXPECT_EQ(SymbolsToBytes("\xE2\x82\xAC"), std::nullopt);  // '€' is none of the 256
  EXPECT_EQ(SymbolsToBytes("\xFF"), std::nullopt);          // not UTF-8
  EXPECT_EQ(SymbolsToBytes(" "), std::nullopt);             // space is spelled 'Ġ'
}

TEST(ByteUnicodeTest, Utf8) {
  for (char32_t c : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(c, &s);
    char32_t back = 0;
    EXPECT_EQ(DecodeUtf8(s, 0, &back), static_cast<int>(s.size()));
    EXPECT_EQ(back, c);
  }
  char32_t c;
  EXPECT_EQ(DecodeUtf8("\xC0\x80", 0, &c), 0);          // overlong
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80", 0, &c), 0);      // surrogate
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80", 0, &c), 0);  // past U+10FFFF
  EXPECT_EQ(DecodeUtf8("\xE2\x82", 0, &c), 0);          // truncated
  EXPECT_EQ(DecodeUtf8("\x80", 0, &c), 0);              // stray continuation
}

}  // namespace
}  // namespace ladder
