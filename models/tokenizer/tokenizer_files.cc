// Loading a tokenizer from files, and the BOS/EOS metadata of tokenizer_config.json and
// generation_config.json.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::tokenizer {
namespace {

// tokenizer.json: the largest real ones (256k-token vocabularies) are tens of MB.
constexpr int64_t kMaxTokenizerFileBytes = int64_t{512} << 20;

// Reads `path` when it exists; empty text otherwise.
absl::StatusOr<std::string> ReadOptional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  return ReadFile(path.string());  // tokenizer_config.json, generation_config.json
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

// An id or a list of ids in generation_config.json; non-integers are ignored, integers that are
// no token id (outside [0, 2^31)) are an error.
absl::StatusOr<std::vector<int32_t>> ConfigIds(const Json& config, const char* key) {
  std::vector<int32_t> ids;
  const Json* v = Find(config, key);
  if (v == nullptr) return ids;
  const Json one = Json::array({*v});
  for (const Json& id : v->is_array() ? *v : one) {
    if (!id.is_number_integer()) continue;
    const std::optional<int32_t> value = AsTokenId(id);
    if (!value) {
      return absl::InvalidArgumentError(absl::StrCat("generation_config.json: \"", key, "\" holds ",
                                                     id.dump(), ", which is not a token id"));
    }
    ids.push_back(*value);
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".txt") return FromRwkvWorldFile(path);
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, kMaxTokenizerFileBytes));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  ASSIGN_OR_RETURN(const std::string config, ReadOptional(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const std::string generation, ReadOptional(dir / "generation_config.json"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromJson(text, config, generation);
  if (!t.ok()) {
    // An error in a file beside it names that file ("generation_config.json: ..."): its path then.
    const absl::string_view m = t.status().message();
    const bool sibling = absl::StartsWith(m, "tokenizer_config.json") ||
                         absl::StartsWith(m, "generation_config.json");
    return absl::Status(t.status().code(),
                        sibling ? (dir / std::string(m)).string() : absl::StrCat(path, ": ", m));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  const std::filesystem::path json = std::filesystem::path(dir) / "tokenizer.json";
  const std::filesystem::path world = std::filesystem::path(dir) / kRwkvWorldVocabFileName;
  std::error_code ec;
  if (!std::filesystem::exists(json, ec) && std::filesystem::exists(world, ec)) {
    return FromRwkvWorldFile(world.string());
  }
  return FromFile(json.string());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromRwkvWorldFile(const std::string& path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  ASSIGN_OR_RETURN(t->world_, RwkvWorldVocab::FromFile(path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  ASSIGN_OR_RETURN(const std::string config, ReadOptional(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const std::string generation, ReadOptional(dir / "generation_config.json"));
  RETURN_IF_ERROR(t->ApplyConfig(config, generation));
  if (!t->special_.bos_id) t->special_.bos_id = kRwkvWorldEndOfText;
  if (t->special_.eos_ids.empty()) t->special_.eos_ids.push_back(kRwkvWorldEndOfText);
  return t;
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
  ASSIGN_OR_RETURN(const std::vector<int32_t> bos_ids, ConfigIds(generation, "bos_token_id"));
  if (!special_.bos_id && !bos_ids.empty()) special_.bos_id = bos_ids[0];
  ASSIGN_OR_RETURN(special_.eos_ids, ConfigIds(generation, "eos_token_id"));
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
