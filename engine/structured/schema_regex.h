// A JSON Schema string's `pattern` (ECMA-262, a search: a match anywhere unless anchored) or
// enforced `format` (string_formats.h) as a DFA of the schema's grammar (Node::regex), within the
// string's lengths. One per schema compile: each distinct pattern and lengths is compiled once, and
// all of them within one RegexBudget (steps, bytes) and kMaxRegexes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "engine/structured/json_grammar.h"
#include "nlohmann/json.hpp"

namespace linfer::structured {

class SchemaRegexes {
 public:
  explicit SchemaRegexes(const RegexBudget& budget) : budget_(budget) {}

  // Whether schema `s` has a format that string_formats.h enforces.
  static bool KnownFormat(const nlohmann::ordered_json& s);

  // Gives string node `n` of `g` (its min and max lengths set) the DFA of schema `s`'s pattern or
  // known format, when it has one. InvalidArgument naming `path`.pattern or `path`.format: both
  // given, not a string, a syntax the automaton cannot take, or past the budget.
  absl::Status Apply(const nlohmann::ordered_json& s, const std::string& path, Grammar& g,
                     int32_t n);

 private:
  const RegexBudget budget_;
  int64_t work_ = 0;   // the compiles' steps so far
  int64_t bytes_ = 0;  // their DFAs' memory
  // (text, search, min chars, max chars) -> index in Grammar::regexes.
  std::map<std::tuple<std::string, bool, int64_t, int64_t>, int32_t> memo_;
};

}  // namespace linfer::structured
