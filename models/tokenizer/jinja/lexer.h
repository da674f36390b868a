// Tokenizer for Jinja templates with jinja2's whitespace rules as transformers configures them:
// trim_blocks, lstrip_blocks, `-`/`+` markers, comments and raw blocks, newline normalisation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer::tokenizer::jinja {

struct SourcePos {
  int line = 1;
  int column = 1;
};

enum class TokenType : uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "(", ...
  kEof,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, operator, or the unescaped string literal
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// Splits `source` into tokens; InvalidArgument "line:column: message" on lexical errors.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

// "line:column: message", the form of every template error.
std::string FormatError(SourcePos pos, absl::string_view message);

}  // namespace linfer::tokenizer::jinja
