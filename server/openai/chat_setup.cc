// LoadChatSetup, NameMissingSpecialTokens.
#include "server/openai/chat_setup.h"

#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace linfer::openai {

absl::StatusOr<ChatSetup> LoadChatSetup(const std::string& model_dir,
                                        const std::string& template_file) {
  ChatSetup setup;
  std::optional<std::string> source;
  if (!template_file.empty()) {
    absl::StatusOr<std::string> text =
        ReadFile(template_file, kMaxTextFileBytes, FileKinds::kAlsoStreams);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat_template ", template_file, ": ", text.status().message()));
    }
    source = *std::move(text);
    setup.origin = template_file;
  } else {
    ASSIGN_OR_RETURN(source, tokenizer::FindChatTemplate(model_dir));
    if (source) setup.origin = absl::StrCat(model_dir, " (tokenizer_config.json or .jinja)");
  }
  ASSIGN_OR_RETURN(setup.special_tokens, tokenizer::FindSpecialTokens(model_dir));
  std::error_code ec;
  setup.has_tokenizer_config =
      std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer_config.json", ec);
  if (!source) return setup;
  setup.syntax = DetectSyntax(*source);
  absl::StatusOr<tokenizer::ChatTemplate> parsed = tokenizer::ChatTemplate::Parse(*source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template of ", setup.origin, ": ", parsed.status().message()));
  }
  setup.chat_template = *std::move(parsed);
  return setup;
}

void NameMissingSpecialTokens(const tokenizer::Tokenizer& tokenizer, std::optional<int64_t> bos_id,
                              std::optional<int64_t> eos_id, ChatSetup* setup) {
  if (setup->has_tokenizer_config) return;
  for (const auto& [key, id] : {std::pair{"bos_token", bos_id}, {"eos_token", eos_id}}) {
    if (!id || *id < 0 || *id > std::numeric_limits<int32_t>::max()) continue;
    if (setup->special_tokens.contains(key)) continue;
    const std::string* text = tokenizer.IdToToken(static_cast<int32_t>(*id));
    if (text != nullptr) setup->special_tokens[key] = *text;
  }
}

}  // namespace linfer::openai
