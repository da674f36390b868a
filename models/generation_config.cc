// generation_config.json → GenerationDefaults.
#include "models/generation_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

constexpr int kMaxDepth = 64;  // generation_config.json's values are scalars and short lists

using Json = nlohmann::json;

absl::Status Bad(const std::string& path, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": '", field, "' ", why));
}

absl::StatusOr<std::optional<float>> Float(const Json& j, const char* key, const std::string& path,
                                           double lo, double hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return Bad(path, key, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return Bad(path, key, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  }
  return static_cast<float>(v);
}

absl::StatusOr<std::optional<int32_t>> Int(const Json& j, const char* key, const std::string& path,
                                           int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return Bad(path, key, "must be an integer");
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? hi + 1 : it->get<int64_t>();
  if (v < lo || v > hi) return Bad(path, key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  return static_cast<int32_t>(v);
}

}  // namespace

absl::StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::filesystem::path& dir) {
  GenerationDefaults d;
  const std::string path = (dir / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return d;
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, 1 << 20));
  if (JsonDeeperThan(text, kMaxDepth)) {  // a deep value would be copied and freed recursively
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nested deeper than ", kMaxDepth, " levels"));
  }
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  ASSIGN_OR_RETURN(d.temperature, Float(j, "temperature", path, 0, 100));
  ASSIGN_OR_RETURN(d.top_p, Float(j, "top_p", path, 0, 1));
  ASSIGN_OR_RETURN(d.min_p, Float(j, "min_p", path, 0, 1));
  ASSIGN_OR_RETURN(d.repetition_penalty, Float(j, "repetition_penalty", path, 1e-6, 100));
  ASSIGN_OR_RETURN(d.top_k, Int(j, "top_k", path, -1, INT32_MAX));
  ASSIGN_OR_RETURN(d.max_new_tokens, Int(j, "max_new_tokens", path, 1, INT32_MAX));
  if (d.top_p && *d.top_p == 0) d.top_p = std::nullopt;  // 0 is not a usable nucleus
  auto eos = j.find("eos_token_id");
  if (eos != j.end() && !eos->is_null()) {
    std::vector<const Json*> ids;  // pointers: an element is never copied
    if (eos->is_array()) {
      for (const Json& e : *eos) ids.push_back(&e);
    } else {
      ids.push_back(&*eos);
    }
    for (const Json* id : ids) {
      const Json& e = *id;
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
        return Bad(path, "eos_token_id", "must be a token id or a list of them");
      }
      d.eos_token_ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
  }
  return d;
}

}  // namespace linfer
