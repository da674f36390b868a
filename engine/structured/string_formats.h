// JSON Schema's string formats as regular expressions (ECMA-262 syntax, matching the whole
// string), so that structured output writes only valid ones: the subset of each format's grammar
// that readers agree on.
//   date       RFC 3339 full-date, years 0001-9999, days within their month (29 February in leap
//              years only);
//   time       RFC 3339 full-time without leap seconds, 'Z' or a ±hh:mm offset;
//   date-time  date 'T' time;
//   duration   RFC 3339 appendix A (ISO 8601: P1Y2M3DT4H5M6S, P3W, PT0.5S is not written);
//   email      dot-atom local part '@' a hostname of two labels or more;
//   hostname   RFC 1123 labels (letters, digits, inner hyphens; 1-63 characters each), at most
//              253 characters;
//   ipv4       dotted quads without leading zeros;
//   ipv6       RFC 4291's text forms (with "::" and a trailing dotted quad), without a zone;
//   uuid       8-4-4-4-12 hexadecimal digits.
// Other formats are annotations: ignored, as JSON Schema's default.
#pragma once

#include <cstdint>
#include <limits>

#include "absl/strings/string_view.h"

namespace linfer::structured {

struct StringFormat {
  const char* pattern;  // null: a format structured output does not enforce
  int64_t max_chars = std::numeric_limits<int64_t>::max();
};

StringFormat FormatOf(absl::string_view format);

}  // namespace linfer::structured
