// Exception-free helpers for reading tokenizer.json with nlohmann::json.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace linfer::tokenizer {

using Json = nlohmann::json;

// Reads a whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Parses JSON text; InvalidArgument naming `what` when it is malformed.
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what);

// The member `key` of object `j`, or nullptr when `j` is not an object, the key is missing or
// its value is null.
const Json* Find(const Json& j, const char* key);

// Required string member; InvalidArgument mentioning `context` otherwise.
absl::StatusOr<std::string> GetString(const Json& j, const char* key, absl::string_view context);

// Optional members with defaults (also used when the value has the wrong type).
std::string GetStringOr(const Json& j, const char* key, const std::string& fallback);
bool GetBoolOr(const Json& j, const char* key, bool fallback);
int64_t GetIntOr(const Json& j, const char* key, int64_t fallback);

// The "type" member of a component object, for error messages and dispatch.
absl::StatusOr<std::string> GetType(const Json& j, absl::string_view component);

}  // namespace linfer::tokenizer
