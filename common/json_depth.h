// How deeply a JSON text nests, found by scanning its brackets outside strings (no parsing). The
// parsers check it first instead of passing nlohmann::json a depth callback: a parse with a
// callback rescans the parent container after every object (nlohmann 3.11.2,
// json_sax_dom_callback_parser::end_object), which makes a 60,000-entry array of objects
// quadratic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace linfer {

// Calls fn(c) for each character of `text` outside strings (escapes included) in order, until
// fn returns false. Malformed text is scanned the same way.
template <typename Fn>
void ForEachOutsideStrings(absl::string_view text, Fn fn) {
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
    } else if (!fn(c)) {
      return;
    }
  }
}

// Whether `text` opens more than `limit` arrays/objects at once (brackets inside strings do not
// count).
inline bool JsonDeeperThan(absl::string_view text, int limit) {
  int depth = 0;
  bool deeper = false;
  ForEachOutsideStrings(text, [&](char c) {
    if (c == '[' || c == '{') {
      deeper = ++depth > limit;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    return !deeper;
  });
  return deeper;
}

// Members one object of a request may have, and what all of a text's objects may cost an
// nlohmann::ordered_json parse in all: its objects find each new key by a linear scan, so an
// object of K members costs ≈ K² / 2 comparisons (40,000 keys took 1.5 s) and a 32 MB body of many
// keys would tie a thread up for hours.
inline constexpr int64_t kMaxJsonObjectMembers = 10000;
inline constexpr int64_t kMaxJsonMemberWork = 3 * kMaxJsonObjectMembers * kMaxJsonObjectMembers / 2;

// Why `text` would be too costly to parse, or "" when it is not: more than `max_depth` nested
// arrays/objects, an object of more than kMaxJsonObjectMembers members, or objects whose squared
// member counts add up to more than kMaxJsonMemberWork (one object of the most members and
// many small ones pass, two of the most do not). Members are the colons at an object's own level.
inline std::string JsonTooCostly(absl::string_view text, int max_depth) {
  std::vector<int64_t> members(static_cast<size_t>(max_depth) + 1, 0);
  std::vector<bool> object(static_cast<size_t>(max_depth) + 1, false);
  int depth = 0;
  int64_t work = 0;
  std::string why;
  auto close = [&] {
    const int64_t k = members[static_cast<size_t>(depth)];
    work += k * k;
    --depth;
  };
  ForEachOutsideStrings(text, [&](char c) {
    if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        why = "nests deeper than " + std::to_string(max_depth) + " levels";
        return false;
      }
      members[static_cast<size_t>(depth)] = 0;
      object[static_cast<size_t>(depth)] = c == '{';
    } else if ((c == ']' || c == '}') && depth > 0) {
      close();
    } else if (c == ':' && depth > 0 && object[static_cast<size_t>(depth)] &&
               ++members[static_cast<size_t>(depth)] > kMaxJsonObjectMembers) {
      why = "has an object of more than " + std::to_string(kMaxJsonObjectMembers) + " members";
      return false;
    }
    return true;
  });
  if (!why.empty()) return why;
  while (depth > 0) close();  // malformed: the parser refuses it, but only after the work
  if (work > kMaxJsonMemberWork) {
    return "has too many object members in all (objects of " +
           std::to_string(kMaxJsonObjectMembers) + " members at most, a few large ones in all)";
  }
  return "";
}

}  // namespace linfer
