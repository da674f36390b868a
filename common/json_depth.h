// How deeply a JSON text nests, found by scanning its brackets outside strings (no parsing). The
// parsers check it first instead of passing nlohmann::json a depth callback: a parse with a
// callback rescans the parent container after every object (nlohmann 3.11.2,
// json_sax_dom_callback_parser::end_object), which makes a 60,000-entry array of objects
// quadratic.
#pragma once

#include "absl/strings/string_view.h"

namespace linfer {

// Whether `text` opens more than `limit` arrays/objects at once. Malformed text is scanned the
// same way (brackets inside strings, escapes included, do not count).
inline bool JsonDeeperThan(absl::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace linfer
