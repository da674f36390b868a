// Bounded JSON parsing and typed field access for OpenAI request bodies.
#include "server/openai/json_fields.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "server/request_builder.h"  // Quote

namespace linfer::openai {

namespace {

// What the JSON parser says of a body it refused, where (line, column) and why ("syntax error
// while parsing object key", "number overflow parsing '1e999'", "ill-formed UTF-8 byte"): the
// body parsed again, throwing, on this error path only. Printable ASCII, at most 300 bytes (the
// parser quotes what it last read).
std::string WhyNotJson(absl::string_view body) {
  std::string what;
  try {
    const Json parsed = Json::parse(body.begin(), body.end());
    return parsed.is_discarded() ? "discarded" : "unknown";
  } catch (const Json::exception& e) {
    what = e.what();
  }
  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
  if (const size_t tag = what.find("] "); !what.empty() && what[0] == '[' && tag != what.npos) {
    what.erase(0, tag + 2);
  }
  if (what.size() > 300) what = what.substr(0, 300) + "...";
  for (char& c : what) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return what;
}

}  // namespace

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  if (body.empty())
    return absl::InvalidArgumentError("the request body is empty; send a JSON object");
  if (const std::string why = JsonTooCostly(body, kMaxBodyDepth); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the request body ", why));
  }
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", WhyNotJson(body)));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body must be a JSON object, got ", TypeName(j)));
  }
  return j;
}

std::string TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float:
      return "a float";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    default:
      return "an unsupported value";
  }
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const Json* Fields::Get(absl::string_view key) const {
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<bool>> Fields::Bool(absl::string_view key) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected a boolean, got ", TypeName(*v)));
  }
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> Fields::String(absl::string_view key) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected a string, got ", TypeName(*v)));
  }
  return v->get<std::string>();
}

absl::StatusOr<std::optional<double>> Fields::Number(absl::string_view key, double lo,
                                                     double hi) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected a number, got ", TypeName(*v)));
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), " must be in [", lo, ", ", hi, "], got ", x));
  }
  return x;
}

absl::StatusOr<std::optional<int64_t>> Fields::Int(absl::string_view key, int64_t lo,
                                                   int64_t hi) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {  // (is_number_integer is true for these too)
    const uint64_t u = v->get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) {  // past int64 too: told as written, not wrapped
      return absl::InvalidArgumentError(
          absl::StrCat(Name(key), " must be in [", lo, ", ", hi, "], got ", u));
    }
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!(std::floor(d) == d) || std::fabs(d) > 9.2e18) {
      return absl::InvalidArgumentError(absl::StrCat(Name(key), ": expected an integer, got ", d));
    }
    x = static_cast<int64_t>(d);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected an integer, got ", TypeName(*v)));
  }
  if (x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), " must be in [", lo, ", ", hi, "], got ", x));
  }
  return x;
}

absl::StatusOr<const Json*> Fields::Object(absl::string_view key) const {
  const Json* v = Get(key);
  if (v != nullptr && !v->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected an object, got ", TypeName(*v)));
  }
  return v;
}

absl::StatusOr<const Json*> Fields::Array(absl::string_view key) const {
  const Json* v = Get(key);
  if (v != nullptr && !v->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(key), ": expected an array, got ", TypeName(*v)));
  }
  return v;
}

absl::StatusOr<std::string> Fields::RequiredString(absl::string_view key) const {
  absl::StatusOr<std::optional<std::string>> v = String(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return FieldError(Name(key), "missing");
  return **std::move(v);
}

std::optional<int64_t> AsInt64(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

Json ParseJsonText(absl::string_view text) {
  if (!JsonTooCostly(text, kMaxBodyDepth).empty()) return nullptr;
  Json v = Json::parse(text, nullptr, false);
  return v.is_discarded() ? Json(nullptr) : v;
}

absl::StatusOr<std::string> TextParts(
    const Json& content, const std::string& field,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>> parts) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return FieldError(field, absl::StrCat("expected a string or an array of content parts, got ",
                                          TypeName(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string where = absl::StrCat(field, "[", i, "]");
    if (!content[i].is_object()) return FieldError(where, "expected an object");
    Fields part(content[i], where + ".");
    ASSIGN_OR_RETURN(std::optional<std::string> type, part.String("type"));
    const auto accepted = std::find_if(parts.begin(), parts.end(), [&](const auto& p) {
      return p.first == type.value_or("text");
    });
    if (accepted == parts.end()) {
      std::vector<absl::string_view> names;
      for (const auto& p : parts) names.push_back(p.first);
      return FieldError(where + ".type",
                        absl::StrCat(Quote(*type), " is not supported (text parts: ",
                                     absl::StrJoin(names, ", "), ")"));
    }
    ASSIGN_OR_RETURN(std::string value, part.RequiredString(accepted->second));
    absl::StrAppend(&text, i == 0 ? "" : "\n", value);
  }
  return text;
}

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace linfer::openai
