// The matcher's steps inside text: JSON strings (chars → escape → hex, \uXXXX with surrogate
// pairs; UTF-8 checked byte by byte, RFC 3629), strings with a pattern (the escapes decoded, then
// the pattern's DFA), a regex output's raw text, and raw text up to a terminator.
#include <limits>

#include "engine/structured/json_matcher.h"

namespace linfer::structured {
namespace {

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
