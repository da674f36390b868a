// The matcher's byte steps, one function per frame kind. A frame that ends (a closing bracket or
// quote taken, a number or literal that cannot take the byte) pops itself; a value frame turns
// into the frame of the node it dispatches to. Phases:
//   object: open `{` → key `"…"` (trie of the keys still allowed) → colon → after value → comma;
//   map: the same with a free string key; array: open `[` → after item → next;
//   string: chars → escape → hex (\uXXXX);
//   number: 0 start, 1 after '-', 2 int "0", 3 int digits, 4 after '.', 5 fraction digits,
//           6 after 'e', 7 after the exponent sign, 8 exponent digits (2, 3, 5, 8 may end);
//           a bounded integer takes a digit only while some value in its range can still come
//           (IntegerReachable), and ends only in range (never "-0"); a bounded number likewise
//           (NumberReachable, FractionReachable: exact, in units of 10^-16), without exponent.
#include "engine/structured/json_matcher.h"

#include <algorithm>
#include <limits>

namespace linfer::structured {
namespace {

enum ObjectPhase : uint8_t { kOpen = 0, kKey = 1, kColon = 2, kAfter = 3, kComma = 4 };
enum ArrayPhase : uint8_t { kArrayOpen = 0, kArrayAfter = 1, kArrayNext = 2 };
// kHex: aux = hex digits left (bits 0-2) and "this is a low surrogate" (bit 3), b = the value so
// far; a high surrogate (D800-DBFF) must be followed by \u and a low one (DC00-DFFF): kLowSlash,
// kLowU. A lone low surrogate is refused at its second digit, so that no prefix is a dead end.
enum StringPhase : uint8_t { kChars = 0, kEscape = 1, kHex = 2, kLowSlash = 3, kLowU = 4 };
constexpr uint8_t kLowFlag = 8;
// kChars, with Grammar::no_close_tags: the last character was '<' (a '/' may not follow).
constexpr uint8_t kAfterAngle = 32;

int HexValue(uint8_t b) {
  if (b >= '0' && b <= '9') return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10;
  return -1;
}

// The byte an escape's letter stands for (JSON's short escapes), or -1.
int EscapedByte(uint8_t letter) {
  switch (letter) {
    case '"':
    case '\\':
    case '/':
      return letter;
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool NumberMayEnd(uint8_t phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

// A bounded integer node: whether a value in [n.min, n.max] is an integer whose first `digits`
// digits (none yet: 0) make `magnitude`, negative or not: the value itself (digits > 0) or one
// with j more digits, magnitude·10^j + [0, 10^j), up to kMaxIntegerDigits in all. Magnitudes stay
// below 10^kMaxIntegerDigits, so nothing overflows.
bool IntegerReachable(const Node& n, bool negative, int64_t magnitude, int digits) {
  auto hits = [&](int64_t a, int64_t b) {  // some magnitude in [a, b]
    const int64_t lo = negative ? -b : a, hi = negative ? -a : b;
    return lo <= n.max && hi >= n.min;
  };
  if (digits == 0) return hits(1, kMaxIntegerMagnitude);  // a first digit but '0' (its own case)
  int64_t scale = 1;
  for (; digits <= kMaxIntegerDigits; ++digits, scale *= 10) {
    if (hits(magnitude * scale, magnitude * scale + scale - 1)) return true;
  }
  return false;
}

// A bounded number (not an integer): whether units [a, b] of magnitude (negated when negative)
// meet its range.
bool UnitsMeet(const Node& n, bool negative, NumberUnits a, NumberUnits b) {
  const NumberUnits lo = negative ? -b : a, hi = negative ? -a : b;
  return lo <= n.max_units && hi >= n.min_units;
}

NumberUnits Pow10(int k) {
  NumberUnits p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// A bounded number's integer part so far (`digits` digits making `magnitude`, the first not 0):
// whether a value in range can still come — the integer or one after it with a fraction, or one
// with j more integer digits and any fraction: [magnitude·10^j, (magnitude + 1)·10^j) in all.
bool NumberReachable(const Node& n, bool negative, int64_t magnitude, int digits) {
  NumberUnits scale = kUnitsPerOne;
  for (; digits <= kMaxIntegerDigits; ++digits, scale *= 10) {
    const NumberUnits a = NumberUnits{magnitude} * scale;
    if (UnitsMeet(n, negative, a, a + scale - 1)) return true;
  }
  return false;
}

// After the point, `digits` fraction digits (0: none yet) making `fraction`: whether a value in
// range can still come, [whole.fraction, whole.fraction + 10^-digits).
bool FractionReachable(const Node& n, bool negative, int64_t whole, int64_t fraction, int digits) {
  const NumberUnits step = Pow10(kMaxFractionDigits - digits);
  const NumberUnits a = NumberUnits{whole} * kUnitsPerOne + NumberUnits{fraction} * step;
  return UnitsMeet(n, negative, a, a + step - 1);
}

// The bytes a UTF-8 continuation may take after a lead byte (RFC 3629, table 3-7 of Unicode):
// range 0 80..BF; 1 A0..BF (after E0); 2 80..9F (after ED); 3 90..BF (after F0); 4 80..8F (F4).
bool InRange(uint8_t b, int range) {
  switch (range) {
    case 1:
      return b >= 0xA0 && b <= 0xBF;
    case 2:
      return b >= 0x80 && b <= 0x9F;
    case 3:
      return b >= 0x90 && b <= 0xBF;
    case 4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

// A character's first byte: the continuation bytes it needs (0-3) and the range of the first of
// them (InRange), or false for a byte no character starts with (a continuation byte, C0, C1,
// F5..FF).
bool LeadByte(uint8_t b, int* pending, int* range) {
  *range = 0;
  if (b < 0x80) {
    *pending = 0;
  } else if (b >= 0xC2 && b <= 0xDF) {
    *pending = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    *pending = 2;
    *range = b == 0xE0 ? 1 : b == 0xED ? 2 : 0;
  } else if (b >= 0xF0 && b <= 0xF4) {
    *pending = 3;
    *range = b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0;
  } else {
    return false;
  }
  return true;
}

// The terminator bytes matched after byte `b` when `k` were matched before it: the longest
// prefix of `t` that ends the text (a plain fallback over the borders; terminators are short).
int32_t MatchTerminator(absl::string_view t, int32_t k, uint8_t b) {
  for (;;) {
    if (static_cast<size_t>(k) < t.size() && static_cast<uint8_t>(t[k]) == b) return k + 1;
    if (k == 0) return 0;
    int32_t border = k - 1;  // the longest proper prefix of t[0, k) that is also its suffix
    while (border > 0 && t.substr(0, border) != t.substr(k - border, border)) --border;
    k = border;
  }
}

}  // namespace

JsonMatcher::JsonMatcher(const Grammar* grammar) : g_(grammar) {
  stack_.reserve(16);
  stack_.push_back({kRoot, 0, 0, -1, 0, 0, 0, 0});
}

bool JsonMatcher::Feed(uint8_t b) {
  if (!IsWhitespace(b)) ws_run_ = 0;
  for (;;) {
    Frame& f = stack_.back();
    Step s = Step::kRefused;
    switch (f.kind) {
      case kRoot:
        s = StepRoot(f, b);
        break;
      case kValue:
        s = StepValue(f, b);
        break;
      case kObject:
        s = StepObject(f, b);
        break;
      case kMap:
        s = StepMap(f, b);
        break;
      case kArray:
        s = StepArray(f, b);
        break;
      case kString:
        s = StepString(f, b);
        break;
      case kNumber:
        s = StepNumber(f, b);
        break;
      case kLiteral:
        s = StepLiteral(f, b);
        break;
      case kSequence:
        s = StepSequence(f, b);
        break;
      case kTagged:
        s = StepTagged(f, b);
        break;
      case kRawText:
        s = StepRawText(f, b);
        break;
      case kRegexText:
        s = StepRegexText(f, b);
        break;
    }
    if (s != Step::kAgain) return s == Step::kTaken;
  }
}

bool JsonMatcher::FeedBytes(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonMatcher::Complete() const {
  const Frame& top = stack_.back();
  if (top.kind == kRoot) {  // before anything: only a regex output that matches the empty text
    return top.phase == 1 ||
           (g_->nodes[g_->root].kind == Node::Kind::kRegex && MayBeEmpty(g_->root));
  }
  return stack_.size() == 2 && MayEndHere(top);
}

bool JsonMatcher::MayEndHere(const Frame& f) const {
  switch (f.kind) {
    case kNumber:
      return NumberMayEnd(f.phase) && InBounds(f);
    case kLiteral:
      return g_->tries[g_->nodes[f.node].literals].nodes[f.a].terminal >= 0;
    case kValue:  // not started: only a value that may be empty
      return MayBeEmpty(f.node);
    case kTagged:
      return f.a == 0 && g_->nodes[f.node].min == 0;
    case kRegexText:
      return RegexOf(f).MayEnd(f.b, f.a);
    case kSequence: {
      const std::vector<int32_t>& parts = g_->nodes[f.node].properties;
      for (size_t i = static_cast<size_t>(f.a); i < parts.size(); ++i) {
        if (!MayBeEmpty(parts[i])) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

bool JsonMatcher::MayBeEmpty(int32_t node) const {
  const Node& n = g_->nodes[node];
  if (n.kind == Node::Kind::kTagged) return n.min == 0;
  if (n.kind == Node::Kind::kRegex) {
    const RegexDfa& dfa = *g_->regexes[static_cast<size_t>(n.regex)];
    return dfa.MayEnd(dfa.start, 0);
  }
  if (n.kind != Node::Kind::kSequence) return false;
  for (int32_t part : n.properties) {  // (sequences nest only as the builders make them: shallow)
    if (!MayBeEmpty(part)) return false;
  }
  return true;
}

bool JsonMatcher::InFreeRawText(int64_t* chars, int64_t* max_chars) const {
  const Frame& top = stack_.back();
  if (top.kind != kRawText || (top.aux & 3) != 0 || top.b != 0) return false;
  *chars = top.a;  // a token without newlines leaves the text's last character no newline
  *max_chars = g_->nodes[top.node].max;
  return true;
}

bool JsonMatcher::InFreeString(int64_t* chars, int64_t* max_chars) const {
  const Frame& top = stack_.back();
  if (top.kind != kString || top.phase != kChars || (top.aux & (3 | kAfterAngle)) != 0 ||
      (top.node >= 0 && g_->nodes[top.node].regex >= 0))
    return false;
  *chars = top.a;
  *max_chars = top.node >= 0 ? g_->nodes[top.node].max : std::numeric_limits<int64_t>::max();
  return true;
}

bool JsonMatcher::InRegex(const RegexDfa** dfa, int32_t* state, int64_t* chars) const {
  const Frame& top = stack_.back();
  const bool pattern = top.kind == kString && top.node >= 0 && g_->nodes[top.node].regex >= 0 &&
                       top.phase == kChars && (top.aux & kAfterAngle) == 0;
  if (!pattern && top.kind != kRegexText) return false;
  *dfa = &RegexOf(top);
  *state = top.b;
  *chars = top.a;
  return true;
}

int64_t JsonMatcher::StringChars() const {
  const Frame& top = stack_.back();
  return top.kind == kString ? top.a : -1;
}

bool JsonMatcher::Whitespace(uint8_t b) {
  if (!IsWhitespace(b) || ws_run_ >= g_->max_whitespace_run) return false;
  ++ws_run_;
  return true;
}

void JsonMatcher::Push(uint8_t kind, int32_t node, uint8_t phase) {
  stack_.push_back({kind, phase, 0, node, 0, 0, 0, 0});
}

bool JsonMatcher::KeyFits(const Node& n, int32_t at, int32_t lo, int32_t hi) const {
  const LiteralTrie& keys = g_->tries[n.literals];
  if (depth_ + n.max_key_depth <= kMaxNesting) return keys.Reaches(at, lo, hi);
  const std::vector<int32_t>& below = keys.nodes[at].below;  // deep in a recursion: one by one
  for (auto it = std::lower_bound(below.begin(), below.end(), lo); it != below.end() && *it <= hi;
       ++it) {
    if (Fits(n.properties[*it])) return true;
  }
  return false;
}

int32_t JsonMatcher::NextRequired(const Node& n, int32_t last) const {
  return n.next_required[static_cast<size_t>(last + 1)];
}

JsonMatcher::Step JsonMatcher::StepRoot(Frame& f, uint8_t /*b*/) {
  // The output is the value alone: no whitespace before it (a weak model's favourite tokens) or
  // after it.
  if (f.phase == 1) return Step::kRefused;
  f.phase = 1;
  Push(kValue, g_->root, /*phase=*/1);  // phase 1: no whitespace first
  return Step::kAgain;
}

JsonMatcher::Step JsonMatcher::StepValue(Frame& f, uint8_t b) {
  if (f.phase == 0 && Whitespace(b)) return Step::kTaken;
  const Node* n = &g_->nodes[f.node];
  while (n->kind == Node::Kind::kUnion) {  // unions of unions (any value) resolve in turn
    const int32_t next = n->dispatch[b];
    if (next < 0) return Step::kRefused;
    f.node = next;
    n = &g_->nodes[next];
  }
  f.a = f.b = 0;
  f.aux = 0;
  switch (n->kind) {
    case Node::Kind::kObject:
    case Node::Kind::kMap:
    case Node::Kind::kArray: {
      const uint8_t open = n->kind == Node::Kind::kArray ? '[' : '{';
      if (b != open || !Fits(f.node)) return Step::kRefused;
      ++depth_;
      f.kind = n->kind == Node::Kind::kObject ? kObject
               : n->kind == Node::Kind::kMap  ? kMap
                                              : kArray;
      f.phase = 0;
      f.a = n->kind == Node::Kind::kObject ? -1 : 0;
      return Step::kTaken;
    }
    case Node::Kind::kString:
      if (b != '"') return Step::kRefused;
      f.kind = kString;
      f.phase = kChars;
      if (n->regex >= 0) f.b = RegexOf(f).start;
      return Step::kTaken;
    case Node::Kind::kNumber:
      f.kind = kNumber;
      f.phase = 0;
      f.aux = 0;
      f.v = 0;
      f.w = 0;
      return StepNumber(f, b);
    case Node::Kind::kLiterals:
      f.kind = kLiteral;
      return StepLiteral(f, b);
    case Node::Kind::kSequence:
      f.kind = kSequence;
      return StepSequence(f, b);
    case Node::Kind::kTagged:
      f.kind = kTagged;
      return StepTagged(f, b);
    case Node::Kind::kRawText:
      f.kind = kRawText;
      f.phase = 0;
      return StepRawText(f, b);
    case Node::Kind::kRegex:
      f.kind = kRegexText;
      f.b = RegexOf(f).start;
      return StepRegexText(f, b);
    case Node::Kind::kUnion:
      break;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepObject(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const LiteralTrie& keys = g_->tries[n.literals];
  const int32_t count = static_cast<int32_t>(n.properties.size());
  const int32_t next_required = NextRequired(n, f.a);
  const int32_t lo = f.a + 1, hi = next_required < count ? next_required : count - 1;
  switch (f.phase) {
    case kOpen:
    case kComma: {
      if (Whitespace(b)) return Step::kTaken;
      if (b == '"') {
        const int32_t child = lo <= hi ? keys.Child(0, b) : -1;
        if (child < 0 || !KeyFits(n, child, lo, hi)) return Step::kRefused;
        f.b = child;
        f.phase = kKey;
        return Step::kTaken;
      }
      if (b == '}' && f.phase == kOpen && next_required == count) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    }
    case kKey: {
      const int32_t child = keys.Child(f.b, b);
      if (child < 0 || !KeyFits(n, child, lo, hi)) return Step::kRefused;
      f.b = child;
      const int32_t key = keys.nodes[child].terminal;
      if (key >= 0 && key >= lo && key <= hi) {  // the closing quote: keys are leaves
        f.a = key;
        f.phase = kColon;
      }
      return Step::kTaken;
    }
    case kColon:
      if (Whitespace(b)) return Step::kTaken;
      if (b != ':') return Step::kRefused;
      f.phase = kAfter;
      Push(kValue, n.properties[f.a]);  // f is not used after this (the stack may move)
      return Step::kTaken;
    case kAfter:
      if (Whitespace(b)) return Step::kTaken;
      if (b == ',' && lo <= hi && KeyFits(n, 0, lo, hi)) {  // some key may follow
        f.phase = kComma;
        return Step::kTaken;
      }
      if (b == '}' && next_required == count) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepMap(Frame& f, uint8_t b) {
  if (Whitespace(b)) return Step::kTaken;
  switch (f.phase) {
    case kOpen:
    case kComma:
      if (b == '"' && Fits(g_->nodes[f.node].value)) {
        f.phase = kColon;
        Push(kString, -1, kChars);
        return Step::kTaken;
      }
      if (b == '}' && f.phase == kOpen) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    case kColon: {
      if (b != ':') return Step::kRefused;
      f.phase = kAfter;
      const int32_t value = g_->nodes[f.node].value;
      Push(kValue, value);
      return Step::kTaken;
    }
    case kAfter:
      if (b == ',' && Fits(g_->nodes[f.node].value)) {
        f.phase = kComma;
        return Step::kTaken;
      }
      if (b == '}') {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepArray(Frame& f, uint8_t b) {
  if (Whitespace(b)) return Step::kTaken;
  const Node& n = g_->nodes[f.node];
  switch (f.phase) {
    case kArrayOpen:
      if (b == ']' && n.min == 0) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      if (n.max == 0 || !Fits(n.value)) return Step::kRefused;
      break;
    case kArrayAfter:
      if (b == ',' && f.a < n.max && Fits(n.value)) {
        f.phase = kArrayNext;
        return Step::kTaken;
      }
      if (b == ']' && f.a >= n.min) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    case kArrayNext:
      break;
  }
  // An item starts with this byte.
  ++f.a;
  f.phase = kArrayAfter;
  Push(kValue, n.value);
  return Step::kAgain;
}

bool JsonMatcher::RegexByte(const RegexDfa& dfa, Frame& f, uint8_t b) {
  const int32_t next = dfa.Next(f.b, b);
  if (next < 0) return false;
  const int64_t chars = f.a + ((b & 0xC0) != 0x80 ? 1 : 0);  // from a character's first byte
  if (chars > std::numeric_limits<int32_t>::max() || !dfa.Fits(next, chars)) return false;
  f.b = next;
  f.a = static_cast<int32_t>(chars);
  return true;
}

JsonMatcher::Step JsonMatcher::StepRegexText(Frame& f, uint8_t b) {
  return RegexByte(RegexOf(f), f, b) ? Step::kTaken : Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepPatternString(Frame& f, uint8_t b) {
  const RegexDfa& dfa = RegexOf(f);
  if (f.phase == kEscape) {
    const int decoded = EscapedByte(b);
    if (decoded < 0 || !RegexByte(dfa, f, static_cast<uint8_t>(decoded))) return Step::kRefused;
    f.phase = kChars;
    f.aux = 0;
    return Step::kTaken;
  }
  if (b == '"') {
    if (!dfa.MayEnd(f.b, f.a)) return Step::kRefused;
    stack_.pop_back();
    return Step::kTaken;
  }
  if (b == '\\') {  // only when some escape's byte may come next (no dead end after it)
    for (const uint8_t letter : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) {
      Frame probe = f;
      if (RegexByte(dfa, probe, static_cast<uint8_t>(EscapedByte(letter)))) {
        f.phase = kEscape;
        return Step::kTaken;
      }
    }
    return Step::kRefused;
  }
  if (b < 0x20 || (b == '/' && (f.aux & kAfterAngle) != 0)) return Step::kRefused;
  if (!RegexByte(dfa, f, b)) return Step::kRefused;  // (the DFA takes valid UTF-8 only)
  f.aux = b == '<' && g_->no_close_tags ? kAfterAngle : 0;
  return Step::kTaken;
}

JsonMatcher::Step JsonMatcher::StepString(Frame& f, uint8_t b) {
  if (f.node >= 0 && g_->nodes[f.node].regex >= 0) return StepPatternString(f, b);
  const bool bounded = f.node >= 0;
  switch (f.phase) {
    case kChars: {
      if (const int pending = f.aux & 3; pending > 0) {
        if (!InRange(b, f.aux >> 2)) return Step::kRefused;
        f.aux = static_cast<uint8_t>(pending - 1);
        return Step::kTaken;
      }
      const int64_t max = bounded ? g_->nodes[f.node].max : std::numeric_limits<int64_t>::max();
      if (b == '"') {
        if (bounded && f.a < g_->nodes[f.node].min) return Step::kRefused;
        stack_.pop_back();
        return Step::kTaken;
      }
      if (b < 0x20 || f.a >= max) return Step::kRefused;
      if (b == '/' && (f.aux & kAfterAngle) != 0) return Step::kRefused;
      if (b == '\\') {
        f.phase = kEscape;
        f.aux = 0;
        return Step::kTaken;
      }
      int pending = 0, range = 0;
      if (!LeadByte(b, &pending, &range)) return Step::kRefused;
      ++f.a;
      if (b == '<' && g_->no_close_tags) {
        f.aux = kAfterAngle;
        return Step::kTaken;
      }
      f.aux = static_cast<uint8_t>(pending | (range << 2));
      return Step::kTaken;
    }
    case kEscape:
      if (b == 'u') {
        f.phase = kHex;
        f.aux = 4;
        f.b = 0;
      } else if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' ||
                 b == 'r' || b == 't') {
        f.phase = kChars;
      } else {
        return Step::kRefused;
      }
      ++f.a;
      return Step::kTaken;
    case kHex: {
      const int digit = HexValue(b);
      if (digit < 0) return Step::kRefused;
      const bool low = (f.aux & kLowFlag) != 0;
      const int left = (f.aux & 7) - 1;
      f.b = f.b * 16 + digit;
      if (left == 2) {  // two digits in: the high byte decides what a surrogate may be
        const bool is_low = f.b >= 0xDC && f.b <= 0xDF;
        if (low ? !is_low : is_low) return Step::kRefused;
      } else if (left == 3 && low && digit != 0xD) {
        return Step::kRefused;
      }
      f.aux = static_cast<uint8_t>(left | (low ? kLowFlag : 0));
      if (left > 0) return Step::kTaken;
      f.phase = !low && f.b >= 0xD800 && f.b <= 0xDBFF ? kLowSlash : kChars;
      f.aux = 0;
      return Step::kTaken;
    }
    case kLowSlash:
      if (b != '\\') return Step::kRefused;
      f.phase = kLowU;
      return Step::kTaken;
    case kLowU:
      if (b != 'u') return Step::kRefused;
      f.phase = kHex;
      f.aux = 4 | kLowFlag;
      f.b = 0;
      return Step::kTaken;
  }
  return Step::kRefused;
}

bool JsonMatcher::InBounds(const Frame& f) const {
  const Node& n = g_->nodes[f.node];
  if (!n.bounded) return true;
  if (n.integer) {
    const int64_t value = f.aux ? -f.v : f.v;
    return value >= n.min && value <= n.max;
  }
  NumberUnits u = NumberUnits{f.v} * kUnitsPerOne;
  if (f.phase == 5) u += NumberUnits{f.w} * Pow10(kMaxFractionDigits - f.a);
  if (f.aux) u = -u;
  return u >= n.min_units && u <= n.max_units;
}

// Numbers, bounded or not. A bounded one takes a byte only while a value within its bounds can
// still come of it (integers: IntegerReachable; numbers: NumberReachable / FractionReachable,
// without exponent); f.v the integer part, f.w the fraction's digits (f.a of them), f.aux 1 after
// a minus sign.
JsonMatcher::Step JsonMatcher::StepNumber(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const bool integer = n.integer, bounded = n.bounded, negative = f.aux != 0;
  auto whole = [&](int64_t magnitude, int digits) {  // the integer part so far may go on
    return !bounded || (integer ? IntegerReachable(n, negative, magnitude, digits)
                                : NumberReachable(n, negative, magnitude, digits));
  };
  auto exponent = [&] {
    if (integer || bounded || (b != 'e' && b != 'E')) return false;
    f.phase = 6;
    return true;
  };
  auto end = [&] {
    if (!InBounds(f)) return Step::kRefused;
    stack_.pop_back();
    return Step::kAgain;
  };
  switch (f.phase) {
    case 0:
    case 1:
      if (b == '-' && f.phase == 0) {
        if (bounded &&
            !(integer ? IntegerReachable(n, true, 0, 0) : UnitsMeet(n, true, 0, kMaxNumberUnits))) {
          return Step::kRefused;
        }
        f.phase = 1;
        f.aux = 1;
      } else if (b == '0') {  // an integer's 0 (never "-0" when bounded), or a number's 0.xxx
        if (bounded && (integer ? negative || 0 < n.min || 0 > n.max
                                : !UnitsMeet(n, negative, 0, kUnitsPerOne - 1))) {
          return Step::kRefused;
        }
        f.phase = 2;
      } else if (b >= '1' && b <= '9') {
        if (!whole(b - '0', 1)) return Step::kRefused;
        f.phase = 3;
        f.a = 1;
        f.v = b - '0';
      } else {
        return Step::kRefused;
      }
      return Step::kTaken;
    case 2:
    case 3:
      if (f.phase == 3 && IsDigit(b) && f.a < kMaxIntegerDigits) {
        const int64_t v = f.v * 10 + (b - '0');
        if (!whole(v, f.a + 1)) return Step::kRefused;
        ++f.a;
        f.v = v;
        return Step::kTaken;
      }
      if (!integer && b == '.') {
        if (bounded && !FractionReachable(n, negative, f.v, 0, 0)) return Step::kRefused;
        f.phase = 4;
        f.a = 0;
        f.w = 0;
        return Step::kTaken;
      }
      return exponent() ? Step::kTaken : end();
    case 4:
    case 5:
      if (IsDigit(b) && f.a < kMaxFractionDigits) {
        const int64_t w = f.w * 10 + (b - '0');
        if (bounded && !FractionReachable(n, negative, f.v, w, f.a + 1)) return Step::kRefused;
        f.phase = 5;
        ++f.a;
        f.w = w;
        return Step::kTaken;
      }
      if (f.phase == 4) return Step::kRefused;
      return exponent() ? Step::kTaken : end();
    case 6:
      if (b == '+' || b == '-') {
        f.phase = 7;
        return Step::kTaken;
      }
      [[fallthrough]];
    case 7:
      if (!IsDigit(b)) return Step::kRefused;
      f.phase = 8;
      f.a = 1;
      return Step::kTaken;
    case 8:
      if (IsDigit(b) && f.a < kMaxExponentDigits) {
        ++f.a;
        return Step::kTaken;
      }
      return end();
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepLiteral(Frame& f, uint8_t b) {
  const LiteralTrie& t = g_->tries[g_->nodes[f.node].literals];
  const int32_t child = t.Child(f.a, b);
  if (child >= 0) {
    f.a = child;
    if (t.nodes[child].terminal >= 0 && t.nodes[child].next.empty()) stack_.pop_back();
    return Step::kTaken;
  }
  if (t.nodes[f.a].terminal < 0) return Step::kRefused;
  stack_.pop_back();  // a literal that could have gone on ("1" of 1 and 12) ends here
  return Step::kAgain;
}

// A sequence starts its parts one at a time as bytes come; the last part takes the sequence's
// frame (a tail call), so that a chain of sequences and tags (a tool call followed by another)
// never deepens the stack.
JsonMatcher::Step JsonMatcher::StepSequence(Frame& f, uint8_t /*b*/) {
  const std::vector<int32_t>& parts = g_->nodes[f.node].properties;
  const auto count = static_cast<int32_t>(parts.size());
  if (f.a >= count) {
    stack_.pop_back();
    return Step::kAgain;
  }
  const int32_t part = parts[static_cast<size_t>(f.a)];
  if (f.a == count - 1) {
    f = {kValue, 1, 0, part, 0, 0, 0, 0};  // phase 1: no whitespace first
    return Step::kAgain;
  }
  ++f.a;
  Push(kValue, part, /*phase=*/1);  // f is not used after this (the stack may move)
  return Step::kAgain;
}

// Tags are prefix-free, so a terminal node of the trie is a whole tag: its follower takes the
// frame. An optional tagged node gives the byte back when no tag starts with it.
JsonMatcher::Step JsonMatcher::StepTagged(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const LiteralTrie& tags = g_->tries[n.literals];
  const int32_t child = tags.Child(f.a, b);
  if (child < 0) {
    if (f.a != 0 || n.min != 0) return Step::kRefused;
    stack_.pop_back();
    return Step::kAgain;
  }
  f.a = child;
  const int32_t tag = tags.nodes[child].terminal;
  if (tag < 0) return Step::kTaken;
  const int32_t next = n.properties[static_cast<size_t>(tag)];
  if (next < 0) {
    stack_.pop_back();
  } else {
    f = {kValue, 1, 0, next, 0, 0, 0, 0};
  }
  return Step::kTaken;
}

// The text's length counts characters known to be text: a byte that may begin the terminator
// stays out of it (f.b) until the match fails, when the bytes it held join the text. phase 1: the
// text's last character is a newline, which min and max do not count (it is the newline a chat
// template writes before the closing tag, which readers strip).
JsonMatcher::Step JsonMatcher::StepRawText(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  if (const int pending = f.aux & 3; pending > 0) {
    if (!InRange(b, f.aux >> 2)) return Step::kRefused;
    f.aux = static_cast<uint8_t>(pending - 1);
    return Step::kTaken;
  }
  if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') return Step::kRefused;
  int pending = 0, range = 0;
  if (!LeadByte(b, &pending, &range)) return Step::kRefused;
  const std::string& end = g_->tries[n.literals].texts[0];
  const int32_t matched = MatchTerminator(end, f.b, b);
  const int64_t length = f.a - (f.phase == 1 ? 1 : 0);
  if (static_cast<size_t>(matched) == end.size()) {  // the end: the text is what it is now
    if (length < n.min) return Step::kRefused;
    stack_.pop_back();
    return Step::kTaken;
  }
  const int32_t added = f.b + 1 - matched;  // characters that are text now (the byte b last)
  int64_t text = f.a;
  uint8_t newline = f.phase;
  if (added > 0) {
    if (f.a > std::numeric_limits<int32_t>::max() - 64) return Step::kRefused;
    newline = matched == 0 ? (b == '\n') : 0;  // else the last is a terminator byte
    text = f.a + added;
    if (text - newline > n.max) return Step::kRefused;
  }
  // Held terminator bytes while the text is still too short: the match must be able to fail,
  // which makes them text (a '<' then holds one byte again), and the text must then still fit.
  if (matched > 0 && text - newline < n.min && text + matched > n.max) return Step::kRefused;
  f.a = static_cast<int32_t>(text);
  f.phase = newline;
  f.b = matched;
  f.aux = static_cast<uint8_t>(pending | (range << 2));
  return Step::kTaken;
}

}  // namespace linfer::structured
