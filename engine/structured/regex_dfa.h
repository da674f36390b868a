// A regular expression (regex_syntax.h) compiled into a DFA over the UTF-8 bytes of the text it
// matches, for the byte matcher (json_matcher.h): a JSON string's `pattern` / `format` and vLLM's
// `regex` output.
//
// Construction: Thompson's NFA over bytes (each code-point range split into UTF-8 byte-range
// sequences, so the DFA takes valid UTF-8 only), then the subset construction over byte classes
// (bytes no edge tells apart share a column). `^` and `$` are edges taken only at the text's
// start / end. A search (JSON Schema: a match anywhere) wraps the pattern as (any char)* P (any
// char)*, with `^` passable only before the first character. States from which no match can be
// reached are removed, so Next() only ever returns a state that can still end as a match.
//
// Lengths (minLength / maxLength beside a pattern, in characters): Fits(state, chars) says whether
// the text can still end as a match with a length in [min_chars, max_chars]. It reads a table of
// the exact numbers of characters that can still come from each state, up to max_chars (or, with
// no maximum, up to min_chars with "min_chars or more" as its last entry), built layer by layer:
// layer r holds the states that can reach an accepting one in exactly r more characters.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/structured/regex_syntax.h"

namespace linfer::structured {

// Bounds on one pattern's automata (before minimization: a search's NFA sets differ long after
// they match alike).
inline constexpr int32_t kMaxNfaStates = 200000;
inline constexpr int32_t kMaxRegexStates = 16384;
// The subset construction's work (NFA states and edges visited, sets sorted and hashed): ≈ 0.2 s
// of a core at most; Moore's minimization's (a round: states × byte classes).
inline constexpr int64_t kMaxRegexWork = int64_t{1} << 24;
inline constexpr int64_t kMaxMinimizeWork = int64_t{1} << 22;

struct RegexOptions {
  RegexFlavor flavor = RegexFlavor::kEcma;
  bool search = false;  // a match anywhere in the text (JSON Schema); else the whole text
  // The text is a JSON string's value, written without \u escapes: no control character but
  // \b \f \n \r \t can be in it.
  bool json_string = false;
  int64_t min_chars = 0;  // the text's length in characters (code points)
  int64_t max_chars = std::numeric_limits<int64_t>::max();
  int64_t max_work = kMaxRegexWork;  // the subset construction's budget
};

// The length table: at most this many bits (states × lengths), and this many steps to build it
// (states × lengths × byte classes).
inline constexpr int64_t kMaxLengthTableBits = int64_t{1} << 24;
inline constexpr int64_t kMaxLengthTableWork = int64_t{1} << 25;

struct RegexDfa {
  static constexpr int32_t kDead = -1;

  int32_t start = kDead;
  int32_t classes = 0;                  // byte classes: columns of `next`
  std::array<uint8_t, 256> class_of{};  // byte -> class
  std::vector<int32_t> next;            // [state * classes + class] -> state, or kDead
  std::vector<uint8_t> accept;          // per state: the text may end here
  int64_t min_chars = 0, max_chars = std::numeric_limits<int64_t>::max();
  // The length table (see above); cap -1: none (no bounds).
  int64_t cap = -1;
  bool saturating = false;  // bit `cap` means "cap or more"
  int64_t words = 0;        // per state
  std::vector<uint64_t> reach;
  int64_t compile_work = 0;  // the subset construction's steps (RegexOptions::max_work)

  int32_t states() const { return static_cast<int32_t>(accept.size()); }
  int32_t Next(int32_t state, uint8_t b) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(classes) + class_of[b]];
  }
  bool Accepts(int32_t state) const { return accept[static_cast<size_t>(state)] != 0; }
  // Whether the text can still end as a match of min_chars..max_chars characters from `state`,
  // `chars` characters written (a character counts from its first byte). A state Next() returns
  // can always still reach a match; this adds the lengths.
  bool Fits(int32_t state, int64_t chars) const;
  // Whether the text may end here: an accepting state, its length within the bounds.
  bool MayEnd(int32_t state, int64_t chars) const {
    return Accepts(state) && chars >= min_chars && chars <= max_chars;
  }
  int64_t MemoryBytes() const;
};

// InvalidArgument naming `where`: the pattern's syntax (ParseRegex), an automaton past its bounds,
// or a pattern that admits no text (within the lengths; as a JSON string: no text of control
// characters other than \b \f \n \r \t).
absl::StatusOr<RegexDfa> CompileRegex(absl::string_view pattern, const RegexOptions& options,
                                      absl::string_view where);

}  // namespace linfer::structured
