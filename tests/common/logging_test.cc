// LogLine: whatever a message carries (a file name with a newline, a 50 MB tensor name from a
// checkpoint's header, bytes that are not UTF-8), Log writes it as one bounded line.
#include "common/logging.h"

#include <gtest/gtest.h>

#include <string>

namespace linfer {
namespace {

TEST(LogLineTest, OneLineOfPrintableTextOrEscapes) {
  EXPECT_EQ(LogLine("plain text, UTF-8 too: ≥ · é"), "plain text, UTF-8 too: ≥ · é");
  EXPECT_EQ(LogLine("a\nW 2026 linfer: forged"), "a\\x0aW 2026 linfer: forged");
  EXPECT_EQ(LogLine(std::string("nul\0tab\t\x7f", 9)), "nul\\x00tab\\x09\\x7f");
  // Bytes that are not UTF-8: a lone continuation byte, a cut sequence, an overlong form, a
  // surrogate, past U+10FFFF.
  EXPECT_EQ(LogLine("\x80|\xe2\x89|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80"),
            "\\x80|\\xe2\\x89|\\xc0\\xaf|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80");
  // UTF-8 that breaks or reorders lines where it is shown: NEL (U+0085), the line separator
  // (U+2028), the right-to-left override (U+202E).
  EXPECT_EQ(LogLine("a\u0085b\u2028c\u202Ed\u00e9"),
            "a\\xc2\\x85b\\xe2\\x80\\xa8c\\xe2\\x80\\xaed\u00e9");
}

TEST(LogLineTest, LongMessagesAreCutWithACount) {
  const std::string name(50 << 20, 'x');
  const std::string line = LogLine("tensor " + name);
  EXPECT_EQ(line.size(), kMaxLogMessageBytes + std::string("... (52412423 more bytes)").size());
  EXPECT_TRUE(line.ends_with("... (52412423 more bytes)")) << line.substr(line.size() - 40);
  EXPECT_EQ(LogLine(std::string(kMaxLogMessageBytes, 'y')), std::string(kMaxLogMessageBytes, 'y'));
}

}  // namespace
}  // namespace linfer
