// The request fields /v1/completions and /v1/chat/completions share (OpenAI's, plus vLLM's
// extras and linfer's sessions), parsed into engine sampling and stop settings. Unknown fields
// are ignored; a field of the wrong type or out of range is InvalidArgument naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/structured/json_grammar.h"
#include "server/http/http_server.h"
#include "server/openai/json_fields.h"
#include "server/request_builder.h"

namespace linfer::openai {

enum class Api { kCompletions, kChat, kResponses, kMessages };

struct CommonParams {
  std::string model;
  SamplingParams sampling;
  StopParams stop;
  RequestedSampling given;
  int n = 1;
  int min_tokens = 0;  // vLLM: EOS and stop conditions only after this many tokens
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM)
  bool logprobs = false;          // the response carries logprobs
  int top_logprobs = 0;           // alternatives per token
  bool tokens_as_ids = false;     // vLLM's return_tokens_as_token_ids: "token_id:N" strings
  // vLLM's return_token_ids (completions and chat): the prompt's token ids and each choice's
  // generated ids in the response.
  bool return_token_ids = false;
  std::string session_id;       // `session_id` field, else the x-session-id header
  bool create_session = false;  // create `session_id` when it does not exist
  int priority = 0;             // vLLM: lower runs first
  std::string cache_salt;       // vLLM's (GenerateRequest::cache_salt); "" when not given
  // vLLM's bad_words (RequestInput::bad_words); allowed_token_ids is in `sampling`.
  std::vector<std::string> bad_words;
  // vLLM's thinking_token_budget (completions and chat; Anthropic's thinking.budget_tokens): the
  // reasoning block is closed after this many tokens; null: no budget (vLLM's -1).
  std::optional<int64_t> thinking_budget;
  std::string user;   // OpenAI's end-user id (logged, not used)
  bool echo = false;  // completions: the prompt precedes the output
  // vLLM's: the tokenizer's special tokens (BOS) around a text prompt (completions: yes; chat:
  // no, the template writes them); null: that default.
  std::optional<bool> add_special_tokens;
  // vLLM's: only the prompt's last this many tokens are kept (-1: max_model_len) — its first ones
  // with truncation_side "right".
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_keeps_start = false;  // vLLM's truncation_side "right" (default "left")
  // vLLM's request_id (the X-Request-Id header wins): the response's id after its "cmpl-" or
  // "chatcmpl-"; "" for a fresh one.
  std::string request_id;
  bool return_prompt_text = false;  // vLLM's (chat): the rendered prompt as "prompt_text"
  // vLLM's prompt_logprobs (completions and chat): the prompt tokens' logprobs with this many
  // alternatives, in vLLM's shape (GenerateRequest::prompt_logprobs).
  std::optional<int> prompt_logprobs;
  // response_format (or vLLM's structured_outputs / guided_json): the output's grammar; null for
  // free text.
  std::shared_ptr<const structured::Grammar> format;
};

// Reads every shared field of `body` (a JSON object). `api` selects the logprobs form (a bool
// plus top_logprobs for chat, an integer for completions) and the max_tokens default (chat:
// as many as the context allows, filled in later; completions: 16, OpenAI's).
absl::StatusOr<CommonParams> ParseCommonParams(const Json& body, Api api,
                                               const HttpRequest& request);

// The largest n a request may ask for.
inline constexpr int kMaxN = 128;
// The most prompts one /v1/completions request may carry.
inline constexpr size_t kMaxPrompts = 256;

// /v1/completions `prompt`: a string, a list of strings, token ids, or lists of token ids (one
// prompt each); errors name the field ("prompt[2][5]: expected a token id").
absl::StatusOr<std::vector<PromptInput>> ParsePrompts(const Json& body);

}  // namespace linfer::openai
