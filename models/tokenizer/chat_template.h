// Chat templates: a Jinja engine that renders a model's chat template exactly as Hugging Face
// transformers' apply_chat_template does (jinja2 ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks, loopcontrols, transformers' tojson, raise_exception and strftime_now).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace linfer::tokenizer {

namespace jinja {
struct Stmt;
}  // namespace jinja

// Finds a model's chat template: tokenizer_config.json "chat_template" (a string, or a list of
// {"name","template"} objects: picks `name`), else chat_template.jinja in the dir. Returns
// std::nullopt when the model has none; errors name the file.
absl::StatusOr<std::optional<std::string>> FindChatTemplate(const std::filesystem::path& model_dir,
                                                            absl::string_view name = "default");

// The special-token strings transformers passes to templates (bos_token, eos_token, unk_token,
// pad_token, ...) from tokenizer_config.json, as a JSON object; empty when there is no config.
absl::StatusOr<nlohmann::ordered_json> FindSpecialTokens(const std::filesystem::path& model_dir);

// The top-level variables transformers' apply_chat_template renders with, in its order:
// messages, tools (null when absent), documents (the request's, else null), add_generation_prompt,
// the special tokens (FindSpecialTokens), then chat_template_kwargs, which override special
// tokens.
// InvalidArgument when a kwarg repeats messages/tools/documents/add_generation_prompt (Python
// raises TypeError there) or when messages is not a list.
absl::StatusOr<nlohmann::ordered_json> ChatTemplateVars(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt, const nlohmann::ordered_json& special_tokens,
    const nlohmann::ordered_json& chat_template_kwargs,
    const nlohmann::ordered_json& documents = nullptr);

struct ChatTemplateOptions {
  int64_t max_output_bytes = 16 << 20;    // rendered text, and any string the template builds
  int max_recursion = 64;                 // macro call depth
  int64_t max_loop_iterations = 1 << 22;  // for-loop iterations per render; list sizes
  int64_t max_work = int64_t{1} << 28;    // bytes produced or scanned per render (list
                                          // and dict items count 32 each): bounds its time
  std::optional<absl::Time> now;          // for strftime_now; unset: absl::Now()
};

// A parsed template. Immutable after Parse; Render is thread-safe and may run concurrently.
class ChatTemplate {
 public:
  // Syntax errors: InvalidArgument "line:column: message".
  static absl::StatusOr<ChatTemplate> Parse(std::string source, ChatTemplateOptions options = {});

  // Renders with top-level variables `vars` (a JSON object: messages, tools,
  // add_generation_prompt, bos_token, eos_token, ... and chat_template_kwargs merged in at top
  // level, as transformers does). Errors: InvalidArgument "line:column: message" for template
  // errors (raise_exception's message, undefined values, type errors), ResourceExhausted for the
  // limits of ChatTemplateOptions. Never throws.
  // Prefer the ordered_json overload: key order of objects reaches the text through `tojson`
  // (transformers keeps the request's order; nlohmann::json sorts keys).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& vars) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& vars) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate() = default;
  template <typename Json>
  absl::StatusOr<std::string> RenderImpl(const Json& vars) const;

  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
  ChatTemplateOptions options_;
};

}  // namespace linfer::tokenizer
