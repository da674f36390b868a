// Exception-free reading of OpenAI request bodies: parsing with a nesting bound, and typed field
// access whose errors are InvalidArgument naming the field ("temperature: expected a number").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace linfer::openai {

// Request JSON keeps the client's key order (tool schemas reach the chat template through tojson).
using Json = nlohmann::ordered_json;

// Deepest nesting of arrays and objects a body may have (deeper bodies are refused before
// anything recurses over them).
inline constexpr int kMaxBodyDepth = 64;

// Parses a request body that must be a JSON object. InvalidArgument for malformed JSON, invalid
// UTF-8, nesting deeper than kMaxBodyDepth or a non-object.
absl::StatusOr<Json> ParseBody(absl::string_view body);

// The JSON value `text` holds (model output, arguments written as text), or null when it is not
// JSON or nests deeper than kMaxBodyDepth.
Json ParseJsonText(absl::string_view text);

// An integer JSON value as an int64, or nullopt when it is not an integer or lies past int64
// (never wrapped: nlohmann's get<int64_t> turns 2^64 - 1 into -1).
std::optional<int64_t> AsInt64(const Json& v);

// Typed optional members of one object. A missing or null member is nullopt; a member of the
// wrong type or out of range is InvalidArgument "<prefix><key>: ...".
class Fields {
 public:
  explicit Fields(const Json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  // The member, or nullptr when it is missing or null.
  const Json* Get(absl::string_view key) const;
  std::string Name(absl::string_view key) const { return prefix_ + std::string(key); }

  absl::StatusOr<std::optional<bool>> Bool(absl::string_view key) const;
  absl::StatusOr<std::optional<std::string>> String(absl::string_view key) const;
  // A string member that must be there ("<prefix><key>: missing").
  absl::StatusOr<std::string> RequiredString(absl::string_view key) const;
  // A number in [lo, hi].
  absl::StatusOr<std::optional<double>> Number(absl::string_view key, double lo, double hi) const;
  // An integer in [lo, hi] (a float with an integral value is accepted, as Python does).
  absl::StatusOr<std::optional<int64_t>> Int(absl::string_view key, int64_t lo, int64_t hi) const;
  // InvalidArgument unless the member, when present, is an object.
  absl::StatusOr<const Json*> Object(absl::string_view key) const;
  absl::StatusOr<const Json*> Array(absl::string_view key) const;

 private:
  const Json& object_;
  std::string prefix_;
};

// Text content as chat templates take it: a string, or an array of parts joined by "\n".
// `parts` maps each accepted part type to the member holding its text ({"text", "text"},
// {"refusal", "refusal"}, ...); a part without a "type" is a "text" part. Errors name the part
// ("messages[0].content[1].type: 'image_url' is not supported (text parts: text, refusal)").
absl::StatusOr<std::string> TextParts(
    const Json& content, const std::string& field,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>> parts);

// InvalidArgument "<field>: <what>".
absl::Status FieldError(absl::string_view field, absl::string_view what);

// A JSON value's type in an error message ("a string", "an array", ...).
std::string TypeName(const Json& value);

// Serialises without throwing (invalid UTF-8 in strings is replaced).
std::string Dump(const Json& value);

}  // namespace linfer::openai
