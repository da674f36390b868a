// Whole-word replacement, for restating shared code's error messages in an API's field names.
#pragma once

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace linfer {

// `text` with every whole-word `from` (not inside a longer identifier: letters, digits, '_')
// replaced by `to`.
inline std::string ReplaceWord(absl::string_view text, absl::string_view from,
                               absl::string_view to) {
  const auto word = [](char c) { return absl::ascii_isalnum(c) || c == '_'; };
  std::string out;
  size_t at = 0;
  for (size_t i = text.find(from); i != absl::string_view::npos; i = text.find(from, i + 1)) {
    const size_t end = i + from.size();
    if ((i > 0 && word(text[i - 1])) || (end < text.size() && word(text[end]))) continue;
    out.append(text.data() + at, i - at);
    out.append(to.data(), to.size());
    at = end;
  }
  out.append(text.data() + at, text.size() - at);
  return out;
}

}  // namespace linfer
