// Python's text forms of values: str(), repr(), float repr, and json.dumps as transformers'
// `tojson` filter calls it; plus the conversion of request JSON into values.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizer/jinja/value.h"
#include "nlohmann/json.hpp"

namespace linfer::tokenizer::jinja {

// Deepest container nesting accepted from JSON or built by a template (Python's recursion limit
// stops json.dumps and repr near 1000; deeper values would risk this process' stack).
inline constexpr int kMaxDepth = 512;

// repr(float): shortest round-trip digits; exponent form below 1e-4 and from 1e16 ("1e-05").
std::string FormatFloat(double d);
// str(value) as jinja2 prints it ({{ x }}, `string` filter, `~`): Undefined prints "".
std::string Str(const Value& v);
// repr(value), as inside str() of a list or dict.
std::string Repr(const Value& v);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // unset: single line
  std::string item_separator = ", ";  // ", " (or "," when indented)
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(value, ...): TypeError-style InvalidArgument for Undefined, namespaces, callables.
absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options);

// Converts request JSON to values (objects keep their member order). InvalidArgument when nested
// deeper than kMaxDepth.
absl::StatusOr<Value> FromJson(const nlohmann::json& j);
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

}  // namespace linfer::tokenizer::jinja
