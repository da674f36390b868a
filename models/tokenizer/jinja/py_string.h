// Python `str` semantics on UTF-8 text: code point indexing, whitespace (str.isspace), case
// mappings (ICU full mappings, as CPython), strip/split/find/count/replace and repr().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace linfer::tokenizer::jinja {

// Decodes UTF-8 leniently (an invalid byte is one code point of its own value).
std::vector<char32_t> CodePoints(absl::string_view s);
std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end);
// Number of code points (Python len()).
int64_t PyLen(absl::string_view s);
// Byte offset of the code point with index `cp_index` (clamped to the end).
size_t ByteOffset(absl::string_view s, int64_t cp_index);

// Python str.isspace() for one code point (also what `\s` matches in Python's re).
bool IsPySpace(char32_t c);

std::string PyStrip(absl::string_view s, std::optional<absl::string_view> chars, bool left,
                    bool right);
// str.split / str.rsplit; `sep` unset splits on whitespace runs. maxsplit < 0: no limit.
// Requires a non-empty `sep`.
std::vector<std::string> PySplit(absl::string_view s, std::optional<absl::string_view> sep,
                                 int64_t maxsplit, bool from_right);
// str.splitlines() (without line ends): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029.
std::vector<std::string> PySplitLines(absl::string_view s);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view repl,
                      int64_t count);
// str.count (non-overlapping; an empty needle counts len + 1).
int64_t PyCount(absl::string_view s, absl::string_view needle);
// str.find / str.rfind: code point index or -1.
int64_t PyFind(absl::string_view s, absl::string_view needle, bool from_right);

std::string PyUpper(absl::string_view s);
std::string PyLower(absl::string_view s);
std::string PyTitle(absl::string_view s);       // str.title()
std::string PyCapitalize(absl::string_view s);  // str.capitalize()
std::string JinjaTitle(absl::string_view s);    // jinja2's `title` filter
bool PyIsLower(absl::string_view s);
bool PyIsUpper(absl::string_view s);
// str.isdigit / isalpha / isalnum / isspace over the whole (non-empty) string.
bool PyIsDigit(absl::string_view s);
bool PyIsAlpha(absl::string_view s);
bool PyIsAlnum(absl::string_view s);
bool PyIsSpaceStr(absl::string_view s);

// repr() of a str, with Python's choice of quotes and escapes.
std::string PyRepr(absl::string_view s);
// markupsafe.escape: & < > " ' as HTML entities.
std::string HtmlEscape(absl::string_view s);

}  // namespace linfer::tokenizer::jinja
