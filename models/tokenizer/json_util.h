// Exception-free helpers for reading tokenizer.json with nlohmann::json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace linfer::tokenizer {

using Json = nlohmann::json;

// Deepest nesting of arrays and objects accepted (the reference's serde_json stops at 128 too):
// deeper documents are refused before anything recurses over them.
inline constexpr int kMaxJsonDepth = 128;

// Parses JSON text; InvalidArgument naming `what` when it is malformed or nested deeper than
// kMaxJsonDepth.
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

// A member that the reference library reads as a Rust `char` (Metaspace "replacement", Strip
// "content", CharDelimiterSplit "delimiter"): `fallback` when missing or null; InvalidArgument
// naming `context` and `key` unless it is a string of exactly one character.
absl::StatusOr<std::string> GetCharOr(const Json& j, const char* key, const std::string& fallback,
                                      absl::string_view context);

// A member read as a Rust `usize`: `fallback` when missing or null; InvalidArgument naming
// `context` and `key` unless it is a non-negative integer. Values past uint64 cannot occur.
absl::StatusOr<uint64_t> GetCountOr(const Json& j, const char* key, uint64_t fallback,
                                    absl::string_view context);

// `v` as a token id: an integer in [0, INT32_MAX] (ids are int32), or nullopt.
std::optional<int32_t> AsTokenId(const Json& v);

// The most a chain of normalizers, pre-tokenizers or decoders may multiply the length of a text
// (worst case, output bytes per input byte). Real tokenizers stay far below (SentencePiece's
// ' ' -> U+2581 is 3, NFKC at most 11); a Sequence of doubling steps would turn a prompt into
// gigabytes.
inline constexpr double kMaxTextGrowth = 256;

// Refuses a component (e.g. "decoder Sequence") whose worst-case growth is above kMaxTextGrowth.
absl::Status CheckGrowth(double growth, absl::string_view component);

}  // namespace linfer::tokenizer
