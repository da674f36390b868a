// Jinja lexer (see lexer.h). Mirrors jinja2.lexer's rules: data runs up to the first `{{`, `{%`
// or `{#`; `-` strips all whitespace on that side, lstrip_blocks removes a block or comment tag's
// indentation, trim_blocks removes one newline after `%}` / `#}`.
#include "models/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/py_string.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::jinja {
namespace {

// jinja2 splits on \r\n, \r and \n, drops one trailing newline and joins with \n.
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the run of Python whitespace starting at `pos`.
size_t SpaceRun(absl::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    int len = 1;
    const auto b = static_cast<unsigned char>(s[i]);
    char32_t c = b;
    if (b >= 0x80 && i + Utf8SequenceLength(b) <= s.size()) c = DecodeUtf8(s, i, &len);
    if (!IsPySpace(c)) break;
    i += len;
  }
  return i - pos;
}

bool IsAllSpace(absl::string_view s) { return !s.empty() && SpaceRun(s, 0) == s.size(); }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run();

 private:
  // Line and column (in code points) of `offset`; incremental for increasing offsets, so
  // tokenizing a long single-line template stays linear.
  SourcePos PosOf(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = it - line_starts_.begin();
    const size_t start = line_starts_[line - 1];
    if (line != cache_line_ || offset < cache_offset_) {
      cache_line_ = line;
      cache_offset_ = start;
      cache_column_ = 1;
    }
    cache_column_ += PyLen(absl::string_view(src_).substr(cache_offset_, offset - cache_offset_));
    cache_offset_ = offset;
    return {static_cast<int>(line), static_cast<int>(cache_column_)};
  }
  absl::Status Error(size_t offset, absl::string_view msg) const {
    return absl::InvalidArgumentError(FormatError(PosOf(offset), msg));
  }
  void Emit(TokenType type, std::string text, size_t offset) {
    tokens_.push_back(Token{type, std::move(text), 0, 0, PosOf(offset)});
  }
  bool At(size_t pos, absl::string_view s) const {
    return absl::string_view(src_).substr(pos, s.size()) == s;
  }
  // Emits the data before a tag at `tag` whose strip marker is `sign`.
  void EmitData(size_t begin, size_t tag, char sign, bool is_variable);
  // Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at `pos`; returns its end or npos.
  size_t MatchRawBegin(size_t pos) const;
  // Matches the end of a block or comment (`+%}`, `-%}\s*`, `%}\n?`) at `pos`.
  size_t MatchTagEnd(size_t pos, char kind) const;
  absl::StatusOr<size_t> LexRaw(size_t pos);
  absl::StatusOr<size_t> LexComment(size_t pos);
  absl::StatusOr<size_t> LexTag(size_t pos, bool is_block);
  absl::StatusOr<size_t> LexNumber(size_t pos);
  absl::StatusOr<size_t> LexString(size_t pos);

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
  mutable size_t cache_line_ = 0, cache_offset_ = 0;
  mutable int64_t cache_column_ = 1;
};

void Lexer::EmitData(size_t begin, size_t tag, char sign, bool is_variable) {
  std::string text = src_.substr(begin, tag - begin);
  if (sign == '-') {
    text = PyStrip(text, std::nullopt, false, true);
  } else if (sign != '+' && !is_variable) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && IsAllSpace(absl::string_view(text).substr(l_pos))) {
      text.resize(l_pos);
    }
  }
  if (!text.empty()) Emit(TokenType::kData, std::move(text), begin);
}

size_t Lexer::MatchRawBegin(size_t pos) const {
  if (!At(pos, "{%")) return std::string::npos;
  size_t i = pos + 2;
  if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
  i += SpaceRun(src_, i);
  if (!At(i, "raw")) return std::string::npos;
  i += 3;
  i += SpaceRun(src_, i);
  if (At(i, "-%}")) return i + 3 + SpaceRun(src_, i + 3);
  if (At(i, "%}")) return i + 2;
  return std::string::npos;
}

size_t Lexer::MatchTagEnd(size_t pos, char kind) const {
  const std::string close = std::string(1, kind) + "}";
  if (At(pos, "+" + close)) return pos + 3;
  if (At(pos, "-" + close)) return pos + 3 + SpaceRun(src_, pos + 3);
  if (At(pos, close)) return pos + 2 + (At(pos + 2, "\n") ? 1 : 0);
  return std::string::npos;
}

absl::StatusOr<size_t> Lexer::LexRaw(size_t pos) {
  for (size_t i = pos; i < src_.size(); ++i) {
    if (!At(i, "{%")) continue;
    size_t j = i + 2;
    const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
    if (sign != 0) ++j;
    j += SpaceRun(src_, j);
    if (!At(j, "endraw")) continue;
    j += 6;
    j += SpaceRun(src_, j);
    const size_t end = MatchTagEnd(j, '%');
    if (end == std::string::npos) continue;
    EmitData(pos, i, sign, false);
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    return end;
  }
  return Error(pos, "Missing end of raw directive");
}

absl::StatusOr<size_t> Lexer::LexComment(size_t pos) {
  for (size_t i = pos; i < src_.size(); ++i) {
    const size_t end = MatchTagEnd(i, '#');
    if (end != std::string::npos) {
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
  }
  return Error(pos, "Missing end of comment tag");
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t tag = pos;
    while (tag + 1 < src_.size() &&
           !(src_[tag] == '{' &&
             (src_[tag + 1] == '{' || src_[tag + 1] == '%' || src_[tag + 1] == '#'))) {
      ++tag;
    }
    if (tag + 1 >= src_.size()) {
      Emit(TokenType::kData, src_.substr(pos), pos);
      break;
    }
    const char kind = src_[tag + 1];
    const char sign =
        tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    const size_t raw_end = MatchRawBegin(tag);
    EmitData(pos, tag, sign, kind == '{');
    line_starting_ = false;
    if (raw_end != std::string::npos) {
      line_starting_ = src_[raw_end - 1] == '\n';
      ASSIGN_OR_RETURN(pos, LexRaw(raw_end));
      continue;
    }
    const size_t body = tag + 2 + (sign != 0 ? 1 : 0);
    if (kind == '#') {
      ASSIGN_OR_RETURN(pos, LexComment(body));
    } else {
      Emit(kind == '%' ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", tag);
      ASSIGN_OR_RETURN(pos, LexTag(body, kind == '%'));
    }
  }
  Emit(TokenType::kEof, "", src_.size());
  return std::move(tokens_);
}

absl::StatusOr<size_t> Lexer::LexTag(size_t pos, bool is_block) {
  static constexpr absl::string_view kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
  static constexpr absl::string_view kOps1 = "+-/*%~[](){}=.:|,;<>";
  std::string balance;
  size_t i = pos;
  while (true) {
    if (i >= src_.size()) return Error(i, "unexpected end of template");
    if (balance.empty()) {
      const size_t end = is_block       ? MatchTagEnd(i, '%')
                         : At(i, "-}}") ? i + 3 + SpaceRun(src_, i + 3)
                         : At(i, "}}")  ? i + 2
                                        : std::string::npos;
      if (end != std::string::npos) {
        Emit(is_block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", i);
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    const char c = src_[i];
    if (const size_t n = SpaceRun(src_, i); n > 0) {
      i += n;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      ASSIGN_OR_RETURN(i, LexNumber(i));
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) {
        ++j;
      }
      Emit(TokenType::kName, src_.substr(i, j - i), i);
      i = j;
    } else if (c == '\'' || c == '"') {
      ASSIGN_OR_RETURN(i, LexString(i));
    } else {
      absl::string_view op;
      for (absl::string_view o : kOps2) {
        if (At(i, o)) op = o;
      }
      if (op.empty() && kOps1.find(c) != absl::string_view::npos) {
        op = absl::string_view(src_).substr(i, 1);
      }
      if (op.empty()) {
        return Error(i, absl::StrCat("unexpected char ", PyRepr(src_.substr(i, 1))));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) return Error(i, absl::StrCat("unexpected '", op, "'"));
        if (balance.back() != op[0]) {
          return Error(i, absl::StrCat("unexpected '", op, "', expected '",
                                       std::string(1, balance.back()), "'"));
        }
        balance.pop_back();
      }
      Emit(TokenType::kOperator, std::string(op), i);
      i += op.size();
    }
  }
}

// Digits with single underscores between them (Python's `(\d+_)*\d+`); returns the end.
size_t DigitRun(absl::string_view s, size_t i, int base) {
  auto is_digit = [base](char c) {
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : std::isxdigit(static_cast<unsigned char>(c))
                      ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                      : 99;
    return v < base;
  };
  if (i >= s.size() || !is_digit(s[i])) return i;
  size_t end = ++i;
  while (i < s.size()) {
    if (s[i] == '_' && i + 1 < s.size() && is_digit(s[i + 1])) ++i;
    if (!is_digit(s[i])) break;
    end = ++i;
  }
  return end;
}

std::string WithoutUnderscores(absl::string_view s) {
  std::string out(s);
  out.erase(std::remove(out.begin(), out.end(), '_'), out.end());
  return out;
}

absl::StatusOr<size_t> Lexer::LexNumber(size_t pos) {
  const absl::string_view s(src_);
  // Float: digits, then an exponent (optionally after a fraction) or a fraction.
  if (pos == 0 || s[pos - 1] != '.') {
    const size_t int_end = DigitRun(s, pos, 10);
    size_t end = int_end;
    if (end < s.size() && s[end] == '.' && DigitRun(s, end + 1, 10) > end + 1) {
      end = DigitRun(s, end + 1, 10);
    }
    if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
      size_t e = end + 1;
      if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
      if (DigitRun(s, e, 10) > e) end = DigitRun(s, e, 10);
    }
    if (end > int_end && (s[end - 1] != '.')) {
      const bool has_exp = s.substr(int_end, end - int_end).find_first_of("eE") != s.npos;
      const bool has_frac = s[int_end] == '.';
      if (has_exp || has_frac) {
        Token t{TokenType::kFloat, std::string(s.substr(pos, end - pos)), 0, 0, PosOf(pos)};
        t.float_value = std::strtod(WithoutUnderscores(t.text).c_str(), nullptr);
        tokens_.push_back(std::move(t));
        return end;
      }
    }
  }
  int base = 10;
  size_t digits = pos;
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos + 1])));
    base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
    if (base != 10) {
      digits = pos + 2;
      if (digits < s.size() && s[digits] == '_') ++digits;
    }
  }
  size_t end = DigitRun(s, digits, base);
  if (base != 10 && end == digits) {
    base = 10;
    digits = pos;
    end = pos + 1;
  } else if (base == 10 && s[pos] == '0') {
    end = pos + 1;  // `0(_?0)*`
    while (end < s.size() &&
           (s[end] == '0' || (s[end] == '_' && end + 1 < s.size() && s[end + 1] == '0'))) {
      ++end;
    }
  }
  const std::string text = WithoutUnderscores(s.substr(digits, end - digits));
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, base);
  if (errno == ERANGE) return Error(pos, "integer literal out of range");
  Token t{TokenType::kInteger, std::string(s.substr(pos, end - pos)), v, 0, PosOf(pos)};
  tokens_.push_back(std::move(t));
  return end;
}

// Appends the code point written as `n` hex digits at s[i]; false when malformed.
bool AppendHexEscape(absl::string_view s, size_t i, int n, std::string* out) {
  if (i + n > s.size()) return false;
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) {
    const char c = s[i + k];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    v = v * 16 + (std::isdigit(static_cast<unsigned char>(c))
                      ? c - '0'
                      : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
  }
  if (v > 0x10FFFF) return false;
  AppendUtf8(static_cast<char32_t>(v), out);
  return true;
}

absl::StatusOr<size_t> Lexer::LexString(size_t pos) {
  const absl::string_view s(src_);
  const char quote = s[pos];
  std::string value;
  size_t i = pos + 1;
  while (i < s.size() && s[i] != quote) {
    if (s[i] != '\\') {
      value.push_back(s[i++]);
      continue;
    }
    if (i + 1 >= s.size()) break;
    const char e = s[i + 1];
    static constexpr absl::string_view kSimple = "\\'\"abfnrtv";
    static constexpr absl::string_view kMapped = "\\'\"\a\b\f\n\r\t\v";
    if (const size_t k = kSimple.find(e); k != absl::string_view::npos) {
      value.push_back(kMapped[k]);
      i += 2;
    } else if (e == '\n') {
      i += 2;
    } else if (e >= '0' && e <= '7') {
      uint32_t v = 0;
      size_t j = i + 1;
      for (int n = 0; n < 3 && j < s.size() && s[j] >= '0' && s[j] <= '7'; ++n) {
        v = v * 8 + (s[j++] - '0');
      }
      AppendUtf8(static_cast<char32_t>(v), &value);
      i = j;
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      if (!AppendHexEscape(s, i + 2, n, &value)) {
        return Error(i, absl::StrCat("truncated \\", std::string(1, e), " escape"));
      }
      i += 2 + n;
    } else if (e == 'N') {
      return Error(i, "\\N{...} escapes are not supported");
    } else {
      value.push_back('\\');
      ++i;
    }
  }
  if (i >= s.size()) return Error(pos, absl::StrCat("unexpected char ", PyRepr(s.substr(pos, 1))));
  Emit(TokenType::kString, std::move(value), pos);
  return i + 1;
}

}  // namespace

std::string FormatError(SourcePos pos, absl::string_view message) {
  return absl::StrCat(pos.line, ":", pos.column, ": ", message);
}

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  RETURN_IF_ERROR(ValidateUtf8(source));
  Lexer lexer(NormalizeNewlines(source));
  return lexer.Run();
}

}  // namespace linfer::tokenizer::jinja
