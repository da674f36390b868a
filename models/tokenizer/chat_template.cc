// Public chat template API (see chat_template.h): template discovery in a model directory,
// parsing, and rendering through the jinja engine with its limits.
#include "models/tokenizer/chat_template.h"

#include <exception>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/interpreter.h"
#include "models/tokenizer/jinja/parser.h"
#include "models/tokenizer/jinja/py_format.h"

namespace linfer::tokenizer {
namespace {

constexpr int64_t kMaxConfigBytes = 64 << 20;

// Reads and parses `path` as JSON with object member order kept; nullopt when it is absent.
absl::StatusOr<std::optional<nlohmann::ordered_json>> ReadConfig(
    const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path.string(), kMaxConfigBytes));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": malformed JSON object"));
  }
  return j;
}

// The text of a special token: a string, or an AddedToken object's "content".
std::optional<std::string> TokenText(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return it->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::optional<std::string>> FindChatTemplate(const std::filesystem::path& model_dir,
                                                            absl::string_view name) {
  const std::filesystem::path config_path = model_dir / "tokenizer_config.json";
  ASSIGN_OR_RETURN(std::optional<nlohmann::ordered_json> config, ReadConfig(config_path));
  if (config.has_value()) {
    auto it = config->find("chat_template");
    if (it != config->end() && it->is_string()) return it->get<std::string>();
    if (it != config->end() && it->is_array()) {
      std::string names;
      for (const auto& entry : *it) {
        if (!entry.is_object()) continue;
        auto n = entry.find("name");
        auto t = entry.find("template");
        if (n == entry.end() || t == entry.end() || !n->is_string() || !t->is_string()) continue;
        if (n->get<std::string>() == name) return t->get<std::string>();
        absl::StrAppend(&names, names.empty() ? "" : ", ", n->get<std::string>());
      }
      return absl::NotFoundError(absl::StrCat(config_path.string(), ": no chat template named '",
                                              name, "' (it has: ", names, ")"));
    }
    if (it != config->end() && !it->is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path.string(), ": chat_template is neither a string nor a list"));
    }
  }
  const std::filesystem::path jinja_path = model_dir / "chat_template.jinja";
  std::error_code ec;
  if (!std::filesystem::exists(jinja_path, ec)) return std::nullopt;
  ASSIGN_OR_RETURN(std::string text, ReadFile(jinja_path.string(), kMaxConfigBytes));
  return text;
}

absl::StatusOr<nlohmann::ordered_json> FindSpecialTokens(const std::filesystem::path& model_dir) {
  ASSIGN_OR_RETURN(std::optional<nlohmann::ordered_json> config,
                   ReadConfig(model_dir / "tokenizer_config.json"));
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!config.has_value()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    auto it = config->find(key);
    if (it == config->end()) continue;
    if (std::optional<std::string> text = TokenText(*it)) out[key] = *text;
  }
  auto extra = config->find("additional_special_tokens");
  if (extra != config->end() && extra->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      if (std::optional<std::string> text = TokenText(t)) list.push_back(*text);
    }
    out["additional_special_tokens"] = std::move(list);
  }
  return out;
}

absl::StatusOr<nlohmann::ordered_json> ChatTemplateVars(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt, const nlohmann::ordered_json& special_tokens,
    const nlohmann::ordered_json& chat_template_kwargs, const nlohmann::ordered_json& documents) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a list");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["tools"] = tools;
  vars["documents"] = documents;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (const auto* extra : {&special_tokens, &chat_template_kwargs}) {
    if (extra->is_null()) continue;
    if (!extra->is_object()) {
      return absl::InvalidArgumentError("special tokens and chat_template_kwargs must be objects");
    }
    for (auto it = extra->begin(); it != extra->end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        return absl::InvalidArgumentError(absl::StrCat(
            "chat_template_kwargs repeats the argument '", key, "' of apply_chat_template"));
      }
      vars[key] = it.value();
    }
  }
  return vars;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source, ChatTemplateOptions options) {
  try {
    ASSIGN_OR_RETURN(jinja::Body body, jinja::ParseTemplate(source));
    ChatTemplate t;
    t.source_ = std::make_shared<const std::string>(std::move(source));
    t.body_ = std::make_shared<const jinja::Body>(std::move(body));
    t.options_ = options;
    return t;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("chat template parse failed: ", e.what()));
  }
}

template <typename Json>
absl::StatusOr<std::string> ChatTemplate::RenderImpl(const Json& vars) const {
  try {
    if (!vars.is_object()) {
      return absl::InvalidArgumentError("chat template variables must be a JSON object");
    }
    ASSIGN_OR_RETURN(jinja::Value top, jinja::FromJson(vars));
    jinja::Limits limits;
    limits.max_output_bytes = options_.max_output_bytes;
    limits.max_recursion = options_.max_recursion;
    limits.max_loop_iterations = options_.max_loop_iterations;
    limits.max_work = options_.max_work;
    limits.now = options_.now.value_or(absl::Now());
    std::string out;
    jinja::Interpreter interpreter(limits, &out);
    RETURN_IF_ERROR(interpreter.Run(*body_, top));
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("chat template render failed: ", e.what()));
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& vars) const {
  return RenderImpl(vars);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& vars) const {
  return RenderImpl(vars);
}

}  // namespace linfer::tokenizer
