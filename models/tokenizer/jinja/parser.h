// Parser from tokens to the syntax tree, following jinja2.parser's grammar and precedence.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/jinja/ast.h"

namespace linfer::tokenizer::jinja {

// Parses a whole template. InvalidArgument "line:column: message" on syntax errors, including
// tags this engine does not support (extends, include, import, block) and nesting deeper than
// `max_depth` expressions or blocks.
absl::StatusOr<Body> ParseTemplate(absl::string_view source, int max_depth = 256);

}  // namespace linfer::tokenizer::jinja
