// A byte-level pushdown matcher for a Grammar (json_grammar.h): Feed(byte) says whether the output
// can go on with that byte and moves on if so. Deterministic (one state, no backtracking): every
// choice is decided by the byte at hand. Strings must be valid UTF-8 (RFC 3629: no overlongs,
// surrogates or code points past U+10FFFF) without raw control characters.
//
// The state is a small stack of frames (32 bytes each, one per open value), so a copy is a short
// memcpy: the token masker copies the matcher once per candidate token.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/structured/json_grammar.h"

namespace linfer::structured {

class JsonMatcher {
 public:
  // `grammar` must outlive the matcher (and its copies).
  explicit JsonMatcher(const Grammar* grammar);

  // Takes one byte, or returns false when it cannot come next. After a false the state is
  // undefined: discard the matcher or assign it a copy taken before.
  bool Feed(uint8_t b);
  // Feeds every byte; false at the first one refused.
  bool FeedBytes(absl::string_view bytes);
  // Whether the output so far is one whole value (the document may end here). A number or a
  // literal that could go on ("12" of [12, 123]) is complete too.
  bool Complete() const;
  // Inside a string whose next bytes are free text (not an escape, no UTF-8 sequence pending, no
  // key or literal trie): the characters it holds so far and the most it may hold, for the
  // token masker's shortcut. False elsewhere.
  bool InFreeString(int64_t* chars, int64_t* max_chars) const;
  // Inside raw text (a kRawText node) where any text may come: no UTF-8 sequence pending and no
  // byte of the terminator matched, so a token without control bytes, '"', '\\' or '<' (whose
  // bytes are valid UTF-8 on their own) is taken whole without ending the text when its
  // characters fit: the text's characters so far and the most it may hold.
  bool InFreeRawText(int64_t* chars, int64_t* max_chars) const;
  // Inside text a regular expression steps (a pattern string's characters, no escape pending and
  // no '<' just before where "</" is barred; or a regex output): its DFA, the DFA's state and the
  // characters so far, for the token masker's DFA walk. A byte other than a control byte, '"' or
  // '\\' (and '<' where "</" is barred) moves only the DFA there. False elsewhere.
  bool InRegex(const RegexDfa** dfa, int32_t* state, int64_t* chars) const;
  // The characters of the string being read (InFreeString's `chars`, also while a UTF-8 sequence
  // is pending), or -1 outside a string.
  int64_t StringChars() const;

 private:
  struct Frame {
    uint8_t kind;   // FrameKind
    uint8_t phase;  // per kind
    uint8_t aux;    // strings: UTF-8 continuation bytes pending (low 2 bits) and the range of the
                    // next one (bits 2-4); \u escapes: hex digits left
    int32_t node;   // the Grammar node (-1: a free string, e.g. a map's key)
    int32_t a;      // strings: characters so far; arrays: items; objects: last key index;
                    // literals: trie node; numbers: digits in the current part
    int32_t b;      // objects: the key trie node while a key is read; patterns: the DFA state
    int64_t v;      // bounded numbers: the integer part's magnitude (aux 1: negative)
    int64_t w;      // bounded numbers: the fraction's digits as an integer
  };
  enum FrameKind : uint8_t {
    kRoot,
    kValue,
    kObject,
    kMap,
    kArray,
    kString,
    kNumber,
    kLiteral,
    kSequence,   // a: the next part to start
    kTagged,     // a: the tag trie node so far
    kRawText,    // a: characters of text so far; b: terminator bytes matched; aux as strings;
                 // phase 1: the text ends with a newline
    kRegexText,  // a: characters so far; b: the DFA's state
  };
  // kHex: aux = hex digits left (bits 0-2) and "this is a low surrogate" (bit 3), b = the value so
  // far; a high surrogate (D800-DBFF) must be followed by \u and a low one (DC00-DFFF): kLowSlash,
  // kLowU. A lone low surrogate is refused at its second digit, so that no prefix is a dead end.
  enum StringPhase : uint8_t { kChars = 0, kEscape = 1, kHex = 2, kLowSlash = 3, kLowU = 4 };
  // kAgain: the top frame changed (ended, or pushed a child) without taking the byte: feed it to
  // the new top.
  enum class Step { kTaken, kRefused, kAgain };

  Step StepRoot(Frame& f, uint8_t b);
  Step StepValue(Frame& f, uint8_t b);
  Step StepObject(Frame& f, uint8_t b);
  Step StepMap(Frame& f, uint8_t b);
  Step StepArray(Frame& f, uint8_t b);
  Step StepString(Frame& f, uint8_t b);
  // A string with a pattern (Node::regex): a: characters so far; b: the DFA's state; phases
  // chars and escape (no \u).
  Step StepPatternString(Frame& f, uint8_t b);
  Step StepRegexText(Frame& f, uint8_t b);
  // Moves a pattern's DFA (frame b, characters a) by one byte of the text when a match of the
  // node's lengths can still follow.
  static bool RegexByte(const RegexDfa& dfa, Frame& f, uint8_t b);
  const RegexDfa& RegexOf(const Frame& f) const {
    return *g_->regexes[static_cast<size_t>(g_->nodes[f.node].regex)];
  }
  Step StepNumber(Frame& f, uint8_t b);
  // A bounded number (Node::bounded): whether it may end here (its value in range).
  bool InBounds(const Frame& f) const;
  // Whether a number may end here (a whole number, in range).
  bool NumberMayEndHere(const Frame& f) const;
  Step StepLiteral(Frame& f, uint8_t b);
  Step StepSequence(Frame& f, uint8_t b);
  Step StepTagged(Frame& f, uint8_t b);
  Step StepRawText(Frame& f, uint8_t b);
  // Whether the top frame (of a two-frame stack) may end without another byte.
  bool MayEndHere(const Frame& f) const;
  // Whether a value of `node` may be empty (an optional tagged node; a sequence of such).
  bool MayBeEmpty(int32_t node) const;
  bool Whitespace(uint8_t b);  // takes b as whitespace when it is one and the run allows
  void Push(uint8_t kind, int32_t node, uint8_t phase = 0);
  // The index of the next key after `last` the object may not skip (its first required key),
  // or the number of keys when none is.
  int32_t NextRequired(const Node& n, int32_t last) const;
  // Whether a value of `node` may start here (its nesting fits beside the open containers).
  bool Fits(int32_t node) const { return depth_ + g_->nodes[node].min_depth <= kMaxNesting; }
  // Whether some key in [lo, hi] whose value fits ends at or below trie node `at` of object `n`.
  bool KeyFits(const Node& n, int32_t at, int32_t lo, int32_t hi) const;

  const Grammar* g_;
  std::vector<Frame> stack_;
  int ws_run_ = 0;  // whitespace bytes in a row
  int depth_ = 0;   // open objects and arrays
};

}  // namespace linfer::structured
