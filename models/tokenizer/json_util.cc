// Exception-free JSON helpers (see json_util.h).
#include "models/tokenizer/json_util.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace linfer::tokenizer {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return buffer.str();
}

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
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

}  // namespace linfer::tokenizer
