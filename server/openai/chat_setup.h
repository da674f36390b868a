// The chat side of a served model: its chat template (tokenizer_config.json, chat_template.jinja,
// or `--chat_template FILE`), the special-token strings templates see, and the reasoning and
// tool-call syntax its replies use.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"
#include "server/openai/chat_output.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

struct ChatSetup {
  std::optional<tokenizer::ChatTemplate> chat_template;  // nullopt: no chat completions
  Json special_tokens = Json::object();                  // bos_token, eos_token, ...
  // The model has a tokenizer_config.json: it alone names the special tokens ("bos_token": null,
  // as Qwen's, or a token left out, means none).
  bool has_tokenizer_config = false;
  ChatSyntax syntax;
  std::string origin;  // where the template came from (for the log), "" when none
};

// `template_file` (when not empty) overrides the model's own template; errors name the file.
absl::StatusOr<ChatSetup> LoadChatSetup(const std::string& model_dir,
                                        const std::string& template_file);

// A model without tokenizer_config.json names no special tokens: transformers leaves bos_token /
// eos_token undefined in a template then, and one that prints them (Mistral's, Llama 2's) fails
// every turn. Names the ones missing from the model's own ids (config.json,
// generation_config.json) when the tokenizer has a token string for them; nothing when the model
// has a tokenizer_config.json (has_tokenizer_config).
void NameMissingSpecialTokens(const tokenizer::Tokenizer& tokenizer, std::optional<int64_t> bos_id,
                              std::optional<int64_t> eos_id, ChatSetup* setup);

}  // namespace linfer::openai
