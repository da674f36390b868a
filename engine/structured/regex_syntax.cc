// A recursive-descent parser for regex_syntax.h's patterns:
//   alternation := concat ('|' concat)*
//   concat      := (atom quantifier?)*
//   atom        := '(' group ')' | '[' class ']' | '.' | '^' | '$' | '\' escape | a character
//   quantifier  := ('*' | '+' | '?' | '{' n (',' m?)? '}') '?'?
#include "engine/structured/regex_syntax.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace linfer::structured {
namespace {

constexpr int kMaxGroupNesting = 200;

CodeSet One(uint32_t c) { return {{c, c}}; }

#include "engine/structured/python_classes.inc"

template <size_t N>
CodeSet Table(const uint32_t (&t)[N][2]) {
  CodeSet s;
  for (const auto& r : t) s.push_back({r[0], r[1]});
  return s;
}

// ECMA-262 (without the i flag): ASCII. Python's str patterns: Unicode (python_classes.inc).
CodeSet Digits(RegexFlavor flavor) {
  if (flavor == RegexFlavor::kPython) return Table(kPythonDigits);
  return {{'0', '9'}};
}
CodeSet Word(RegexFlavor flavor) {
  if (flavor == RegexFlavor::kPython) return Table(kPythonWord);
  return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
}
CodeSet Space(RegexFlavor flavor) {
  CodeSet s = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
               {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
               {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  if (flavor == RegexFlavor::kPython) {  // Python's str.isspace(): also these, not U+FEFF
    s.push_back({0x1C, 0x1F});
    s.push_back({0x85, 0x85});
    s.erase(std::remove(s.begin(), s.end(), std::make_pair(uint32_t{0xFEFF}, uint32_t{0xFEFF})),
            s.end());
  }
  return Normalize(std::move(s));
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t Hex(char c) {
  if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<uint32_t>(c - 'a' + 10);
  return static_cast<uint32_t>(c - 'A' + 10);
}
bool IsAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

class Parser {
 public:
  Parser(absl::string_view p, RegexFlavor flavor, absl::string_view where)
      : p_(p), flavor_(flavor), where_(where) {}

  absl::StatusOr<RegexNode> Parse() {
    if (p_.size() > kMaxRegexBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_, ": longer than ", kMaxRegexBytes, " bytes"));
    }
    absl::StatusOr<RegexNode> r = Alternation(0);
    if (!r.ok()) return r;
    if (pos_ < p_.size()) return Error("an unmatched ')'");  // Alternation stops only there
    return r;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", what, " at offset ", pos_));
  }
  absl::Status Refused(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, ": ", what, " at offset ", pos_,
                     " is not supported (structured output compiles the pattern to an automaton)"));
  }
  bool More() const { return pos_ < p_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  bool Next(absl::string_view s) const { return p_.substr(pos_, s.size()) == s; }

  absl::StatusOr<RegexNode> Alternation(int depth) {
    if (depth > kMaxGroupNesting) {
      return Error(absl::StrCat("groups nest deeper than ", kMaxGroupNesting));
    }
    RegexNode alt;
    alt.kind = RegexNode::Kind::kAlt;
    for (;;) {
      absl::StatusOr<RegexNode> c = Concatenation(depth);
      if (!c.ok()) return c.status();
      alt.subs.push_back(*std::move(c));
      if (!More() || Peek() != '|') break;
      ++pos_;
    }
    if (alt.subs.size() == 1) return std::move(alt.subs[0]);
    return alt;
  }

  absl::StatusOr<RegexNode> Concatenation(int depth) {
    RegexNode cat;
    cat.kind = RegexNode::Kind::kConcat;
    while (More() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '*' || Peek() == '+' || Peek() == '?' || (Peek() == '{' && CountsAhead())) {
        return Error("nothing to repeat");
      }
      absl::StatusOr<RegexNode> atom = Atom(depth);
      if (!atom.ok()) return atom.status();
      absl::StatusOr<RegexNode> q = Quantified(*std::move(atom));
      if (!q.ok()) return q.status();
      cat.subs.push_back(*std::move(q));
    }
    if (cat.subs.size() == 1) return std::move(cat.subs[0]);
    return cat;
  }

  // `atom` with the quantifier that follows it, if any.
  absl::StatusOr<RegexNode> Quantified(RegexNode atom) {
    int32_t lo = 0, hi = 0;
    const bool anchor = atom.kind == RegexNode::Kind::kBegin || atom.kind == RegexNode::Kind::kEnd;
    if (anchor &&
        (Peek() == '*' || Peek() == '+' || Peek() == '?' || (Peek() == '{' && CountsAhead()))) {
      return Error("nothing to repeat");  // an anchor (as Python and ECMA-262 say)
    }
    if (Peek() == '*') {
      lo = 0, hi = -1, ++pos_;
    } else if (Peek() == '+') {
      lo = 1, hi = -1, ++pos_;
    } else if (Peek() == '?') {
      lo = 0, hi = 1, ++pos_;
    } else if (Peek() == '{') {
      absl::StatusOr<bool> counted = Count(&lo, &hi);
      if (!counted.ok()) return counted.status();
      if (!*counted) return atom;  // a literal '{' (the next atom)
    } else {
      return atom;
    }
    if (Peek() == '?') {
      ++pos_;  // lazy: the same language
    } else if (Peek() == '+') {
      if (flavor_ == RegexFlavor::kEcma) return Error("a quantifier after a quantifier");
      return Refused("a possessive quantifier");
    }
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || (Peek() == '{' && CountsAhead())) {
      return Error("a quantifier after a quantifier");
    }
    RegexNode r;
    r.kind = RegexNode::Kind::kRepeat;
    r.min = lo;
    r.max = hi;
    r.subs.push_back(std::move(atom));
    return r;
  }

  // Whether a counted quantifier starts here.
  bool CountsAhead() {
    const size_t saved = pos_;
    int32_t lo = 0, hi = 0;
    absl::StatusOr<bool> c = Count(&lo, &hi);
    pos_ = saved;
    return !c.ok() || *c;
  }

  // At '{': reads {n}, {n,}, {n,m} (and Python's {,m}); false (nothing read) when it is none.
  absl::StatusOr<bool> Count(int32_t* lo, int32_t* hi) {
    size_t i = pos_ + 1;
    auto number = [&](int64_t* v) {
      const size_t from = i;
      *v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        *v = std::min<int64_t>(*v * 10 + (p_[i] - '0'), int64_t{1} << 40);
        ++i;
      }
      return i > from;
    };
    int64_t a = 0, b = 0;
    const bool has_a = number(&a);
    if (!has_a && flavor_ != RegexFlavor::kPython) return false;
    bool has_comma = false, has_b = false;
    if (i < p_.size() && p_[i] == ',') {
      has_comma = true;
      ++i;
      has_b = number(&b);
    }
    if (i >= p_.size() || p_[i] != '}' || (!has_a && !has_comma)) return false;
    if (!has_comma) b = a, has_b = true;
    if (a > kMaxRegexCount || (has_b && b > kMaxRegexCount)) {
      return Refused(absl::StrCat("a count above ", kMaxRegexCount));
    }
    if (has_b && b < a) return Error("a count whose maximum is below its minimum");
    *lo = static_cast<int32_t>(a);
    *hi = has_b ? static_cast<int32_t>(b) : -1;
    pos_ = i + 1;
    return true;
  }

  absl::StatusOr<RegexNode> Atom(int depth) {
    RegexNode n;
    n.kind = RegexNode::Kind::kSet;
    const char c = Peek();
    if (c == '(') return Group(depth);
    if (c == '[') {
      ++pos_;
      absl::StatusOr<CodeSet> s = Class();
      if (!s.ok()) return s.status();
      n.set = *std::move(s);
      return n;
    }
    if (c == '.') {
      ++pos_;
      CodeSet not_dot = flavor_ == RegexFlavor::kPython
                            ? CodeSet{{'\n', '\n'}}
                            : CodeSet{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
      n.set = Subtract(AnyCodePoint(), not_dot);
      return n;
    }
    if (c == '^' || c == '$') {
      ++pos_;
      n.kind = c == '^' ? RegexNode::Kind::kBegin : RegexNode::Kind::kEnd;
      return n;
    }
    if (c == '\\') {
      ++pos_;
      if (flavor_ == RegexFlavor::kPython && (Peek() == 'A' || Peek() == 'Z' || Peek() == 'z')) {
        n.kind = Peek() == 'A' ? RegexNode::Kind::kBegin : RegexNode::Kind::kEnd;
        ++pos_;
        return n;
      }
      absl::StatusOr<CodeSet> s = Escape(/*in_class=*/false);
      if (!s.ok()) return s.status();
      n.set = *std::move(s);
      return n;
    }
    absl::StatusOr<uint32_t> cp = Character();
    if (!cp.ok()) return cp.status();
    n.set = One(*cp);
    return n;
  }

  absl::StatusOr<RegexNode> Group(int depth) {
    const size_t open = pos_;
    ++pos_;  // '('
    if (Peek() == '?') {
      if (Next("?:")) {
        pos_ += 2;
      } else if (Next("?P<") || (Next("?<") && Peek(2) != '=' && Peek(2) != '!')) {
        pos_ += Peek(1) == 'P' ? 3 : 2;
        const size_t close = p_.find('>', pos_);
        // An identifier (ASCII here), each name once.
        if (close == absl::string_view::npos || close == pos_ ||
            (p_[pos_] >= '0' && p_[pos_] <= '9')) {
          return Error("a malformed group name");
        }
        for (size_t i = pos_; i < close; ++i) {
          if (!IsAlnum(p_[i]) && p_[i] != '_') return Error("a malformed group name");
        }
        if (!names_.insert(std::string(p_.substr(pos_, close - pos_))).second) {
          return Error("a group name given twice");
        }
        pos_ = close + 1;
      } else if (Next("?=") || Next("?!") || Next("?<=") || Next("?<!")) {
        return Refused("a lookaround");
      } else if (Next("?P=")) {
        return Refused("a backreference");
      } else if (Next("?>")) {
        return Refused("an atomic group");
      } else {
        return Refused("an inline flag or group extension");
      }
    }
    absl::StatusOr<RegexNode> inner = Alternation(depth + 1);
    if (!inner.ok()) return inner.status();
    if (Peek() != ')' || !More()) {
      pos_ = open;
      return Error("a '(' without its ')'");
    }
    ++pos_;
    return inner;
  }

  // After '['.
  absl::StatusOr<CodeSet> Class() {
    const size_t open = pos_ - 1;
    bool negated = false;
    if (Peek() == '^') negated = true, ++pos_;
    CodeSet set;
    bool first = true;
    for (;;) {
      if (!More()) {
        pos_ = open;
        return Error("a '[' without its ']'");
      }
      if (Peek() == ']' && !(first && flavor_ == RegexFlavor::kPython)) break;
      first = false;
      // One item: a character or an escape, maybe the start of a range.
      absl::StatusOr<CodeSet> lo_set = ClassAtom();
      if (!lo_set.ok()) return lo_set.status();
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < p_.size()) {
        if (lo_set->size() != 1 || (*lo_set)[0].first != (*lo_set)[0].second) {
          return Error("a range that starts at a class escape");
        }
        ++pos_;
        absl::StatusOr<CodeSet> hi_set = ClassAtom();
        if (!hi_set.ok()) return hi_set.status();
        if (hi_set->size() != 1 || (*hi_set)[0].first != (*hi_set)[0].second) {
          return Error("a range that ends at a class escape");
        }
        const uint32_t lo = (*lo_set)[0].first, hi = (*hi_set)[0].first;
        if (hi < lo) return Error("a range out of order");
        set.push_back({lo, hi});
      } else {
        set.insert(set.end(), lo_set->begin(), lo_set->end());
      }
    }
    ++pos_;  // ']'
    set = Normalize(std::move(set));
    return negated ? Subtract(AnyCodePoint(), set) : set;
  }

  absl::StatusOr<CodeSet> ClassAtom() {
    if (Peek() == '\\') {
      ++pos_;
      return Escape(/*in_class=*/true);
    }
    absl::StatusOr<uint32_t> cp = Character();
    if (!cp.ok()) return cp.status();
    return One(*cp);
  }

  // After '\\'.
  absl::StatusOr<CodeSet> Escape(bool in_class) {
    if (!More()) return Error("a '\\' at the end");
    const size_t at = pos_ - 1;  // the backslash: where refusals point
    const char c = Peek();
    ++pos_;
    switch (c) {
      case 'd':
        return Digits(flavor_);
      case 'D':
        return Subtract(AnyCodePoint(), Digits(flavor_));
      case 'w':
        return Word(flavor_);
      case 'W':
        return Subtract(AnyCodePoint(), Word(flavor_));
      case 's':
        return Space(flavor_);
      case 'S':
        return Subtract(AnyCodePoint(), Space(flavor_));
      case 't':
        return One('\t');
      case 'n':
        return One('\n');
      case 'r':
        return One('\r');
      case 'f':
        return One('\f');
      case 'v':
        return One('\v');
      case 'b':
        if (in_class) return One('\b');
        pos_ = at;
        return Refused("a word boundary");
      case 'B':
        pos_ = at;
        if (in_class) return Error("an unknown escape '\\B'");
        return Refused("a word boundary");
      case 'a':
        if (flavor_ == RegexFlavor::kPython) return One('\a');
        break;
      case '0':
        if (Peek() >= '0' && Peek() <= '9') {
          pos_ = at;
          return Refused("an octal escape");
        }
        return One(0);
      case 'x':
        return HexDigits(2);
      case 'u':
        if (Peek() == '{' && flavor_ == RegexFlavor::kEcma) {
          ++pos_;
          uint32_t v = 0;
          size_t digits = 0;
          for (; More() && IsHex(Peek()); ++pos_, ++digits)
            v = std::min(v * 16 + Hex(Peek()), 0x110000u);
          if (digits == 0 || Peek() != '}') return Error("a malformed \\u{…}");
          ++pos_;
          return Checked(v);
        }
        if (flavor_ == RegexFlavor::kEcma && pos_ + 10 <= p_.size()) {
          // A surrogate pair as two escapes (\uD83D\uDE00): one code point.
          uint32_t hi = 0, lo = 0;
          bool pair = p_[pos_ + 4] == '\\' && p_[pos_ + 5] == 'u';
          for (size_t i = 0; i < 4 && pair; ++i) {
            pair = IsHex(p_[pos_ + i]) && IsHex(p_[pos_ + 6 + i]);
            if (pair) hi = hi * 16 + Hex(p_[pos_ + i]), lo = lo * 16 + Hex(p_[pos_ + 6 + i]);
          }
          if (pair && hi >= 0xD800 && hi <= 0xDBFF && lo >= 0xDC00 && lo <= 0xDFFF) {
            pos_ += 10;
            return One(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
          }
        }
        return HexDigits(4);
      case 'U':
        if (flavor_ == RegexFlavor::kPython) return HexDigits(8);
        break;
      case 'p':
      case 'P':
        pos_ = at;
        return Refused("a Unicode property escape");
      case 'k':
        pos_ = at;
        return Refused("a backreference");
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      pos_ = at;
      return Refused("a backreference");
    }
    if (IsAlnum(c)) {
      pos_ = at;
      return Error(absl::StrCat("an unknown escape '\\", std::string(1, c), "'"));
    }
    --pos_;
    absl::StatusOr<uint32_t> cp = Character();  // escaped punctuation (or any other character)
    if (!cp.ok()) return cp.status();
    return One(*cp);
  }

  absl::StatusOr<CodeSet> HexDigits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (!IsHex(Peek()) || !More())
        return Error(absl::StrCat("an escape short of ", n, " hex digits"));
      v = v * 16 + Hex(Peek());
      ++pos_;
    }
    return Checked(v);
  }

  absl::StatusOr<CodeSet> Checked(uint32_t v) const {
    if (v > 0x10FFFF) return Error("a code point past U+10FFFF");
    if (v >= 0xD800 && v <= 0xDFFF) return Refused("a surrogate code point");
    return One(v);
  }

  // One UTF-8 character of the pattern.
  absl::StatusOr<uint32_t> Character() {
    const auto b0 = static_cast<uint8_t>(p_[pos_]);
    int n = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
      ++pos_;
      return b0;
    }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 1, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 2, cp = b0 & 0x0F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 3, cp = b0 & 0x07;
    } else {
      return Error("invalid UTF-8");
    }
    if (pos_ + static_cast<size_t>(n) >= p_.size()) return Error("invalid UTF-8");
    for (int i = 1; i <= n; ++i) {
      const auto b = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t least = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
    if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return Error("invalid UTF-8");
    }
    pos_ += static_cast<size_t>(n) + 1;
    return cp;
  }

  absl::string_view p_;
  RegexFlavor flavor_;
  std::string where_;
  size_t pos_ = 0;
  std::set<std::string> names_;  // the named groups so far
};

}  // namespace

CodeSet AnyCodePoint() { return {{0, 0xD7FF}, {0xE000, 0x10FFFF}}; }

CodeSet Normalize(CodeSet r) {
  r = Subtract(r, {});
  return r;
}

CodeSet Subtract(const CodeSet& a, const CodeSet& b) {
  // Both sorted first; surrogates go with b.
  CodeSet x = a, y = b;
  y.push_back({0xD800, 0xDFFF});
  auto merge = [](CodeSet v) {
    std::sort(v.begin(), v.end());
    CodeSet out;
    for (const auto& [lo, hi] : v) {
      if (!out.empty() && lo <= out.back().second + 1) {
        out.back().second = std::max(out.back().second, hi);
      } else {
        out.push_back({lo, hi});
      }
    }
    return out;
  };
  x = merge(std::move(x));
  y = merge(std::move(y));
  CodeSet out;
  size_t j = 0;
  for (auto [lo, hi] : x) {
    while (j < y.size() && y[j].second < lo) ++j;
    uint32_t at = lo;
    for (size_t k = j; k < y.size() && y[k].first <= hi; ++k) {
      if (y[k].first > at) out.push_back({at, y[k].first - 1});
      if (y[k].second >= hi) {
        at = hi + 1;
        break;
      }
      at = std::max(at, y[k].second + 1);
    }
    if (at <= hi) out.push_back({at, hi});
  }
  return out;
}

absl::StatusOr<RegexNode> ParseRegex(absl::string_view pattern, RegexFlavor flavor,
                                     absl::string_view where) {
  return Parser(pattern, flavor, where).Parse();
}

}  // namespace linfer::structured
