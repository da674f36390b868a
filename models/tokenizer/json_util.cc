// Exception-free JSON helpers (see json_util.h).
#include "models/tokenizer/json_util.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  // The parser itself keeps its own stack; copies, printing and the component parsers recurse.
  if (JsonDeeperThan(text, kMaxJsonDepth)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed JSON"));
  }
  return j;
}

const Json* Find(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> GetString(const Json& j, const char* key, absl::string_view context) {
  const Json* v = Find(j, key);
  if (v == nullptr || !v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": missing or non-string field \"", key, "\""));
  }
  return v->get<std::string>();
}

std::string GetStringOr(const Json& j, const char* key, const std::string& fallback) {
  const Json* v = Find(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
}

bool GetBoolOr(const Json& j, const char* key, bool fallback) {
  const Json* v = Find(j, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

int64_t GetIntOr(const Json& j, const char* key, int64_t fallback) {
  const Json* v = Find(j, key);
  return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : fallback;
}

absl::StatusOr<std::string> GetType(const Json& j, absl::string_view component) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(component, " must be a JSON object"));
  }
  return GetString(j, "type", component);
}

absl::StatusOr<std::string> GetCharOr(const Json& j, const char* key, const std::string& fallback,
                                      absl::string_view context) {
  const Json* v = Find(j, key);
  if (v == nullptr) return fallback;
  // JSON strings are valid UTF-8, so one character is one sequence spanning the string.
  if (!v->is_string() || v->get_ref<const std::string&>().empty() ||
      Utf8SequenceLength(static_cast<unsigned char>(v->get_ref<const std::string&>()[0])) !=
          static_cast<int>(v->get_ref<const std::string&>().size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": \"", key, "\" must be one character, got ", v->dump().substr(0, 40)));
  }
  return v->get<std::string>();
}

absl::StatusOr<uint64_t> GetCountOr(const Json& j, const char* key, uint64_t fallback,
                                    absl::string_view context) {
  const Json* v = Find(j, key);
  if (v == nullptr) return fallback;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<int64_t>();
  return absl::InvalidArgumentError(absl::StrCat(
      context, ": \"", key, "\" must be a non-negative integer, got ", v->dump().substr(0, 40)));
}

std::optional<int32_t> AsTokenId(const Json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= std::numeric_limits<int32_t>::max()) {
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= 0 &&
      v.get<int64_t>() <= std::numeric_limits<int32_t>::max()) {
    return static_cast<int32_t>(v.get<int64_t>());
  }
  return std::nullopt;
}

absl::Status CheckGrowth(double growth, absl::string_view component) {
  if (growth <= kMaxTextGrowth) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      component, ": can make a text up to ", growth, " times longer (a Sequence multiplies the ",
      "growth of its steps); at most ", kMaxTextGrowth, " is accepted"));
}

}  // namespace linfer::tokenizer
