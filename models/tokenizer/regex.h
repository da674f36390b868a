// Regular expressions for Split / Replace patterns: PCRE2 (UTF + UCP, JIT) with Oniguruma's
// meaning of \s, \S, \w, \W and \h, so that tokenizer.json patterns split as the reference does.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

// A match [start, end) in bytes.
struct MatchSpan {
  size_t start;
  size_t end;
};

class Regex {
 public:
  // Compiles a pattern written for Oniguruma (the syntax tokenizer.json files use).
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern);
  // A pattern that matches `text` literally (tokenizer.json {"String": ...} patterns).
  static std::unique_ptr<Regex> Literal(absl::string_view text);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the successive non-overlapping matches in `text` (valid UTF-8) to `out`, leftmost
  // first; an empty match right after the previous match is skipped, as Oniguruma's iterator
  // does. Thread-safe.
  absl::Status FindAll(absl::string_view text, std::vector<MatchSpan>* out) const;

 private:
  Regex() = default;
  std::string literal_;
  bool is_literal_ = false;
  void* code_ = nullptr;  // pcre2_code_8*
};

// A tokenizer.json pattern object: {"String": "..."} or {"Regex": "..."}.
absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern, absl::string_view context);

// Rewrites an Oniguruma pattern into PCRE2 syntax (exposed for tests).
std::string TranslateOnigPattern(absl::string_view pattern);

}  // namespace linfer::tokenizer
