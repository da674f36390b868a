// Loading a tokenizer from files, and the BOS/EOS metadata of tokenizer_config.json and
// generation_config.json.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::tokenizer {
namespace {

// Reads `path` when it exists; empty text otherwise.
absl::StatusOr<std::string> ReadOptional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  return ReadFile(path.string());
}

// A token in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> ConfigToken(const Json& config, const char* key) {
  const Json* v = Find(config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const Json* c = Find(*v, "content"); c != nullptr && c->is_string()) {
    return c->get<std::string>();
  }
  return std::nullopt;
}

// An id or a list of ids in generation_config.json.
std::vector<int32_t> ConfigIds(const Json& config, const char* key) {
  std::vector<int32_t> ids;
  const Json* v = Find(config, key);
  if (v == nullptr) return ids;
  if (v->is_number_integer()) ids.push_back(v->get<int32_t>());
  if (v->is_array()) {
    for (const Json& id : *v) {
      if (id.is_number_integer()) ids.push_back(id.get<int32_t>());
    }
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  ASSIGN_OR_RETURN(const std::string config, ReadOptional(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const std::string generation, ReadOptional(dir / "generation_config.json"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromJson(text, config, generation);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  return FromFile((std::filesystem::path(dir) / "tokenizer.json").string());
}

absl::Status Tokenizer::ApplyConfig(absl::string_view config_json,
                                    absl::string_view generation_json) {
  Json config, generation;
  if (!config_json.empty()) {
    ASSIGN_OR_RETURN(config, ParseJson(config_json, "tokenizer_config.json"));
  }
  if (!generation_json.empty()) {
    ASSIGN_OR_RETURN(generation, ParseJson(generation_json, "generation_config.json"));
  }
  if (std::optional<std::string> bos = ConfigToken(config, "bos_token")) {
    special_.bos_id = TokenToId(*bos);
  }
  if (!special_.bos_id) {
    std::vector<int32_t> ids = ConfigIds(generation, "bos_token_id");
    if (!ids.empty()) special_.bos_id = ids[0];
  }
  special_.eos_ids = ConfigIds(generation, "eos_token_id");
  if (std::optional<std::string> eos = ConfigToken(config, "eos_token")) {
    std::optional<int32_t> id = TokenToId(*eos);
    if (id && std::find(special_.eos_ids.begin(), special_.eos_ids.end(), *id) ==
                  special_.eos_ids.end()) {
      special_.eos_ids.push_back(*id);
    }
  }
  special_.add_bos_token = GetBoolOr(config, "add_bos_token", false);
  special_.add_eos_token = GetBoolOr(config, "add_eos_token", false);
  return absl::OkStatus();
}

}  // namespace linfer::tokenizer
