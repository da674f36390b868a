// RWKV World vocabulary parsing: Python literal evaluation and the errors (naming file:line) for
// malformed, hostile or inconsistent vocabulary files.
#include "models/tokenizer/rwkv_world.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linfer::tokenizer {
namespace {

using ::testing::HasSubstr;

std::string Literal(absl::string_view literal) {
  absl::StatusOr<std::string> bytes = ParsePythonStringLiteral(literal);
  EXPECT_TRUE(bytes.ok()) << literal << ": " << bytes.status();
  return bytes.ok() ? *bytes : "<error>";
}

void ExpectLiteralError(absl::string_view literal, absl::string_view message) {
  absl::StatusOr<std::string> bytes = ParsePythonStringLiteral(literal);
  ASSERT_FALSE(bytes.ok()) << literal << " parsed as " << *bytes;
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr(message)) << literal;
}

TEST(RwkvWorldLiteralTest, StrAndBytesForms) {
  EXPECT_EQ(Literal("'abc'"), "abc");
  EXPECT_EQ(Literal("\"it's\""), "it's");
  EXPECT_EQ(Literal("  'padded'\t"), "padded");
  EXPECT_EQ(Literal("u'x'"), "x");
  EXPECT_EQ(Literal("'\xE4\xB8\xAD\xE6\x96\x87'"), "\xE4\xB8\xAD\xE6\x96\x87");  // raw UTF-8
  EXPECT_EQ(Literal("b'\\xe4\\xb8'"), "\xE4\xB8");
  EXPECT_EQ(Literal("B\"\\xff\""), "\xFF");
  EXPECT_EQ(Literal("''").size(), 0u);
}

TEST(RwkvWorldLiteralTest, Escapes) {
  EXPECT_EQ(Literal(R"('\n\t\r\\\'\"')"), "\n\t\r\\'\"");
  EXPECT_EQ(Literal(R"('\a\b\f\v')"), "\a\b\f\v");
  EXPECT_EQ(Literal(R"('\x00')"), std::string(1, '\0'));
  // In a str literal \xhh is a code point (two UTF-8 bytes above 0x7F); in bytes it is a byte.
  EXPECT_EQ(Literal(R"('\xe9')"), "\xC3\xA9");
  EXPECT_EQ(Literal(R"(b'\xe9')"), "\xE9");
  EXPECT_EQ(Literal(R"('\u2003')"), "\xE2\x80\x83");
  EXPECT_EQ(Literal(R"('\U0001F600')"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(Literal(R"('\101\0\377')"), std::string("A\0\xC3\xBF", 4));
  EXPECT_EQ(Literal(R"(b'\101\377')"), "A\xFF");
  // \u is no escape in a bytes literal: Python keeps it, but deprecates it, so it is an error.
  ExpectLiteralError(R"(b'\u2003')", "invalid escape sequence \\u");
}

TEST(RwkvWorldLiteralTest, Errors) {
  ExpectLiteralError("abc", "expected a Python string literal");
  ExpectLiteralError("", "expected a Python string literal");
  ExpectLiteralError("r'raw'", "expected a Python string literal");
  ExpectLiteralError("'abc", "unterminated");
  ExpectLiteralError("'abc\\'", "unterminated");
  ExpectLiteralError("'a' 'b'", "after the closing quote");
  ExpectLiteralError("'a'b", "after the closing quote");
  ExpectLiteralError("'''a'''", "triple-quoted");
  ExpectLiteralError(R"('\q')", "invalid escape sequence \\q");
  ExpectLiteralError(R"('\x4')", "truncated \\x");
  ExpectLiteralError(R"('\u12')", "truncated \\u");
  ExpectLiteralError(R"('\ud800')", "surrogate U+D800");
  ExpectLiteralError(R"('\U00110000')", "out of range");
  ExpectLiteralError(R"('\N{DASH}')", "\\N{...}");
  ExpectLiteralError(R"('\777')", "above \\377");
  ExpectLiteralError("b'\xC3\xA9'", "only ASCII");
  ExpectLiteralError("'\xFF'", "UTF-8");
}

void ExpectVocabError(absl::string_view text, absl::string_view message) {
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab = RwkvWorldVocab::FromText(text, "v.txt");
  ASSERT_FALSE(vocab.ok()) << "accepted: " << text.substr(0, 200);
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vocab.status().message(), HasSubstr(message)) << text;
}

TEST(RwkvWorldVocabTest, ParsesLinesInAnyOrder) {
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab =
      RwkvWorldVocab::FromText("3 'b' 1\r\n1 'a' 1\n7 b'\\xe4\\xb8' 2\n5 ' a b ' 5", "v.txt");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ((*vocab)->num_tokens(), 4);
  EXPECT_EQ((*vocab)->id_limit(), 8);
  EXPECT_EQ(*(*vocab)->IdToToken(5), " a b ");  // spaces inside the literal are kept
  EXPECT_EQ(*(*vocab)->IdToToken(7), "\xE4\xB8");
  EXPECT_EQ((*vocab)->IdToToken(2), nullptr);
  EXPECT_EQ((*vocab)->IdToToken(0), nullptr);
  EXPECT_EQ((*vocab)->IdToToken(-1), nullptr);
  EXPECT_EQ((*vocab)->IdToToken(8), nullptr);
  EXPECT_EQ((*vocab)->TokenToId(" a b "), 5);
  EXPECT_EQ((*vocab)->TokenToId(" a b"), std::nullopt);
  EXPECT_EQ((*vocab)->TokenToId(""), std::nullopt);
}

TEST(RwkvWorldVocabTest, MalformedLinesNameFileAndLine) {
  ExpectVocabError("1 'a' 1\n2'b'1\n", "v.txt:2: expected `<id> <literal> <byte length>`");
  ExpectVocabError("1 'a'\n", "v.txt:1: expected");
  ExpectVocabError("x1 'a' 1\n", "v.txt:1: id \"x1\" is not a decimal number");
  ExpectVocabError("-1 'a' 1\n", "is not a decimal number");
  ExpectVocabError("1 'a' one\n", "byte length \"one\" is not a decimal number");
  ExpectVocabError("1 'a' 1 \n", "byte length \"\" is not a decimal number");
  ExpectVocabError("1 'a' 1\n2 'b 1\n", "v.txt:2: unterminated");
  ExpectVocabError("1 'a' 1\n\n2 'b' 1\n", "v.txt:2: empty line");
  ExpectVocabError("1 'a\tb' 3\n2 'c\x01' 2\n", "v.txt:2: raw control character 0x01");
  ExpectVocabError("1 'a' 1\n2 '\xE4\xB8' 2\n", "v.txt:2: ");  // invalid UTF-8 in the file
}

TEST(RwkvWorldVocabTest, InconsistentEntries) {
  ExpectVocabError("1 'a' 1\n2 'bc' 3\n", "v.txt:2: the literal has 2 bytes but the line says 3");
  ExpectVocabError("1 '\xC3\xA9' 1\n", "the literal has 2 bytes but the line says 1");
  ExpectVocabError("1 'a' 1\n2 'b' 1\n1 'c' 1\n",
                   "v.txt:3: duplicate id 1 (first defined on line 1)");
  ExpectVocabError("0 'a' 1\n", "v.txt:1: id 0 is out of range [1, 1048575] (0 is <|endoftext|>)");
  ExpectVocabError("1048576 'a' 1\n", "id 1048576 is out of range");
  ExpectVocabError("999999999 'a' 1\n", "out of range");
  ExpectVocabError("1234567890 'a' 1\n", "is not a decimal number");
  ExpectVocabError("1 '' 0\n", "v.txt:1: empty token");
  ExpectVocabError("", "v.txt: no tokens");
}

TEST(RwkvWorldVocabTest, SizeBounds) {
  const std::string long_token(kRwkvWorldMaxTokenBytes + 1, 'x');
  ExpectVocabError(absl::StrCat("1 '", long_token, "' ", long_token.size(), "\n"), "exceeds 1024");
  std::string many;
  const std::string token(1000, 'y');
  for (int id = 1; many.size() <= kRwkvWorldMaxTotalTokenBytes + 200000; ++id) {
    absl::StrAppend(&many, id, " '", token, id, "' ", token.size() + absl::StrCat(id).size(), "\n");
  }
  ExpectVocabError(many, "tokens exceed 8388608 bytes in all");
  ExpectVocabError(std::string(kRwkvWorldMaxFileBytes + 1, ' '), "v.txt: 33554433 bytes");
}

TEST(RwkvWorldVocabTest, MissingFile) {
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab =
      RwkvWorldVocab::FromFile("/nonexistent/rwkv_vocab_v20230424.txt");
  ASSERT_FALSE(vocab.ok());
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace linfer::tokenizer
