// Python str methods on UTF-8 (see py_string.h). Case mappings and character classes use ICU,
// which carries the same Unicode data CPython's unicodedata uses.
#include "models/tokenizer/jinja/py_string.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::jinja {
namespace {

// Decodes one code point at `pos`, bounds-checked; invalid bytes decode to themselves.
char32_t Next(absl::string_view s, size_t pos, int* len) {
  const auto b = static_cast<unsigned char>(s[pos]);
  const int n = Utf8SequenceLength(b);
  if (n == 1 || pos + n > s.size()) {
    *len = 1;
    return b;
  }
  for (int i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[pos + i]) & 0xC0) != 0x80) {
      *len = 1;
      return b;
    }
  }
  return DecodeUtf8(s, pos, len);
}

std::string Encode(char32_t c) {
  std::string out;
  AppendUtf8(c, &out);
  return out;
}

enum class CaseOp { kUpper, kLower, kTitle };

std::string MapCase(absl::string_view s, CaseOp op) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), s.size()));
  switch (op) {
    case CaseOp::kUpper:
      u.toUpper(icu::Locale::getRoot());
      break;
    case CaseOp::kLower:
      u.toLower(icu::Locale::getRoot());
      break;
    case CaseOp::kTitle:
      u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE);
      break;
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool IsAlpha(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

bool IsDigit(char32_t c) {
  const int t = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}

bool IsNumericChar(char32_t c) {
  return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

template <typename Pred>
bool AllOf(absl::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : CodePoints(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

// Whether all cased characters have property `prop` and at least one is cased.
bool CasedAll(absl::string_view s, UProperty prop) {
  bool cased = false;
  for (char32_t c : CodePoints(s)) {
    const auto u = static_cast<UChar32>(c);
    const bool is_lower = u_hasBinaryProperty(u, UCHAR_LOWERCASE);
    const bool is_upper = u_hasBinaryProperty(u, UCHAR_UPPERCASE);
    const bool is_title = u_charType(u) == U_TITLECASE_LETTER;
    if (is_title || (prop == UCHAR_LOWERCASE ? is_upper : is_lower)) return false;
    if (is_lower || is_upper) cased = true;
  }
  return cased;
}

}  // namespace

std::vector<char32_t> CodePoints(absl::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    out.push_back(Next(s, i, &len));
    i += len;
  }
  return out;
}

std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) AppendUtf8(cps[i], &out);
  return out;
}

int64_t PyLen(absl::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    Next(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

size_t ByteOffset(absl::string_view s, int64_t cp_index) {
  size_t i = 0;
  for (int64_t k = 0; k < cp_index && i < s.size(); ++k) {
    int len = 1;
    Next(s, i, &len);
    i += len;
  }
  return i;
}

bool IsPySpace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string PyStrip(absl::string_view s, std::optional<absl::string_view> chars, bool left,
                    bool right) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::vector<char32_t> set;
  if (chars.has_value()) set = CodePoints(*chars);
  auto strip = [&](char32_t c) {
    return chars.has_value() ? std::find(set.begin(), set.end(), c) != set.end() : IsPySpace(c);
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return FromCodePoints(cps, begin, end);
}

std::vector<std::string> PySplit(absl::string_view s, std::optional<absl::string_view> sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep.has_value()) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == absl::string_view::npos) break;
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.emplace_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.substr(0, end).rfind(*sep);
      if (hit == absl::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<char32_t> cps = CodePoints(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t end = cps.size();
      while (end > i && IsPySpace(cps[end - 1])) --end;
      std::vector<char32_t> rest(cps.begin() + i, cps.begin() + end);
      if (from_right) std::reverse(rest.begin(), rest.end());
      out.push_back(FromCodePoints(rest, 0, rest.size()));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    std::vector<char32_t> word(cps.begin() + i, cps.begin() + j);
    if (from_right) std::reverse(word.begin(), word.end());
    out.push_back(FromCodePoints(word, 0, word.size()));
    i = j;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(absl::string_view s) {
  std::vector<std::string> out;
  const std::vector<char32_t> cps = CodePoints(s);
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.push_back(FromCodePoints(cps, start, i));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) out.push_back(FromCodePoints(cps, start, cps.size()));
  return out;
}

std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::vector<char32_t> cps = CodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        absl::StrAppend(&out, repl);
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == absl::string_view::npos) break;
    absl::StrAppend(&out, s.substr(pos, hit - pos));
    absl::StrAppend(&out, repl);
    pos = hit + old.size();
    ++done;
  }
  absl::StrAppend(&out, s.substr(pos));
  return out;
}

int64_t PyCount(absl::string_view s, absl::string_view needle) {
  if (needle.empty()) return PyLen(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(needle); pos != absl::string_view::npos;
       pos = s.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

int64_t PyFind(absl::string_view s, absl::string_view needle, bool from_right) {
  const size_t hit = from_right ? s.rfind(needle) : s.find(needle);
  if (hit == absl::string_view::npos) return -1;
  return PyLen(s.substr(0, hit));
}

std::string PyUpper(absl::string_view s) { return MapCase(s, CaseOp::kUpper); }
std::string PyLower(absl::string_view s) { return MapCase(s, CaseOp::kLower); }

std::string PyTitle(absl::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : CodePoints(s)) {
    out += MapCase(Encode(c), previous_cased ? CaseOp::kLower : CaseOp::kTitle);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  const std::vector<char32_t> cps = CodePoints(s);
  if (cps.empty()) return "";
  return MapCase(Encode(cps[0]), CaseOp::kTitle) +
         MapCase(FromCodePoints(cps, 1, cps.size()), CaseOp::kLower);
}

std::string JinjaTitle(absl::string_view s) {
  // Words are the runs between separators [-\s({\[<]: first character upper, rest lower.
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
  };
  const std::vector<char32_t> cps = CodePoints(s);
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    if (is_sep(cps[i])) {
      AppendUtf8(cps[i++], &out);
      continue;
    }
    size_t j = i + 1;
    while (j < cps.size() && !is_sep(cps[j])) ++j;
    out += MapCase(Encode(cps[i]), CaseOp::kUpper);
    out += MapCase(FromCodePoints(cps, i + 1, j), CaseOp::kLower);
    i = j;
  }
  return out;
}

bool PyIsLower(absl::string_view s) { return CasedAll(s, UCHAR_LOWERCASE); }
bool PyIsUpper(absl::string_view s) { return CasedAll(s, UCHAR_UPPERCASE); }
bool PyIsDigit(absl::string_view s) { return AllOf(s, IsDigit); }
bool PyIsAlpha(absl::string_view s) { return AllOf(s, IsAlpha); }
bool PyIsAlnum(absl::string_view s) {
  return AllOf(s, [](char32_t c) { return IsAlpha(c) || IsNumericChar(c); });
}
bool PyIsSpaceStr(absl::string_view s) { return AllOf(s, IsPySpace); }

std::string PyRepr(absl::string_view s) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : CodePoints(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02x", static_cast<uint32_t>(c));
    } else if (c < 0x7F || IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else if (c <= 0xFF) {
      out += absl::StrFormat("\\x%02x", static_cast<uint32_t>(c));
    } else if (c <= 0xFFFF) {
      out += absl::StrFormat("\\u%04x", static_cast<uint32_t>(c));
    } else {
      out += absl::StrFormat("\\U%08x", static_cast<uint32_t>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string HtmlEscape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace linfer::tokenizer::jinja
