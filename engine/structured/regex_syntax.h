// Regular expressions' syntax for structured output: a pattern parsed into a tree of code-point
// sets (regex_dfa.h compiles it). Two flavours: ECMA-262 (JSON Schema's `pattern`) and Python's
// `re` (vLLM's `regex` output); they differ in `.`, `\d \w \s`, `\A \Z \z` and a leading `]` in a
// class.
//
// Taken: literals (UTF-8), `.`, classes `[...]` (ranges, negation, escapes), `\d \D \w \W \s \S`
// (ECMA-262: ASCII digits and word characters; Python: Unicode's, from python_classes.inc; `\s` is
// ECMA's white space, Python's adds \x1c-\x1f and \x85 and drops U+FEFF), escapes
// `\t \n \r \f \v \0 \xHH \uHHHH` (ECMA: also `\u{H…}` and surrogate pairs `\uD83D\uDE00`; Python:
// `\UHHHHHHHH \a`) and any escaped punctuation, groups `(…) (?:…) (?P<n>…) (?<n>…)`, alternation,
// `* + ? {n} {n,} {n,m}` and their lazy forms (the same language), anchors `^ $` (Python also
// `\A \Z \z`). A `{` that starts no quantifier is a literal. Python's `$` matches at the end only
// (not before a final newline): a subset of Python's language, so every text taken still matches.
// Refused by name (InvalidArgument "<where>: <what> at offset N is not supported"):
// backreferences, lookaround, `\b \B`, inline flags, `\p{…}`, Python's possessive quantifiers.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer::structured {

// Code points as sorted, disjoint, non-adjacent inclusive ranges; never a surrogate (D800-DFFF).
using CodeSet = std::vector<std::pair<uint32_t, uint32_t>>;

struct RegexNode {
  enum class Kind : uint8_t {
    kSet,     // one character of `set`
    kConcat,  // subs one after the other (none: the empty text)
    kAlt,     // one of subs
    kRepeat,  // subs[0], min..max times (max -1: unbounded)
    kBegin,   // ^: only at the text's start
    kEnd,     // $: only at its end
  };
  Kind kind = Kind::kConcat;
  CodeSet set;
  std::vector<RegexNode> subs;
  int32_t min = 0, max = 0;
};

enum class RegexFlavor : uint8_t { kEcma, kPython };

// The most a counted repetition may say ({n,m}: n, m ≤ this) and the longest pattern, in bytes.
inline constexpr int32_t kMaxRegexCount = 1000;
inline constexpr size_t kMaxRegexBytes = 16 << 10;

// InvalidArgument naming `where` and the offset for what is malformed or refused.
absl::StatusOr<RegexNode> ParseRegex(absl::string_view pattern, RegexFlavor flavor,
                                     absl::string_view where);

// Every code point but the surrogates: [0, D7FF] ∪ [E000, 10FFFF].
CodeSet AnyCodePoint();
// `a` without the code points of `b`.
CodeSet Subtract(const CodeSet& a, const CodeSet& b);
// Ranges sorted and merged (overlapping or adjacent ones become one; surrogates taken out).
CodeSet Normalize(CodeSet ranges);

}  // namespace linfer::structured
