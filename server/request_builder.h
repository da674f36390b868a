// Protocol-neutral request preparation, shared by the gRPC Generate reactor and the OpenAI HTTP
// API: the model check, the session's history, tokenisation of a text prompt (or of a rendered
// chat prompt), token-id validation, the EOS merge and the model's generation defaults. Front ends
// parse their own wire format into a RequestInput; errors are InvalidArgument naming the field
// (in the front end's own spelling), NotFound for an unknown model or session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/request.h"
#include "server/service_context.h"

namespace linfer {

// Client text for an error message: quoted, C-escaped, cut to `max_bytes` (never echo unbounded
// client input).
std::string Quote(absl::string_view client_text, size_t max_bytes = 64);

// Which sampling fields a request set itself; the others take the model's generation defaults.
struct RequestedSampling {
  bool temperature = false, top_p = false, top_k = false, min_p = false;
  bool repetition_penalty = false, max_tokens = false;
};
void ApplyGenerationDefaults(const GenerationDefaults& defaults, const RequestedSampling& given,
                             GenerateRequest* request);

// The prompt of a request before tokenisation, and the names its fields have on the wire.
struct PromptInput {
  enum class Kind { kNone, kText, kTokenIds };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<int32_t> token_ids;
  // nullopt: the tokenizer's special tokens (BOS) only at the start of a conversation (no
  // session history); rendered chat prompts pass false (the template writes them).
  std::optional<bool> add_special_tokens;
  std::string text_field = "text";                         // error prefix for text problems
  std::string ids_field = "token_ids.ids";                 // ids_field[i] names a bad id
  std::string missing = "prompt: give text or token_ids";  // no prompt and no session
};

struct RequestInput {
  std::string model;  // "" accepts the served model
  // vLLM's truncate_prompt_tokens: only the prompt's last this many tokens are kept (-1:
  // max_model_len); null: all.
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_keeps_start = false;  // vLLM's truncation_side "right": the first tokens kept
  std::string session_id;
  std::string owner;
  PromptInput prompt;
  SamplingParams sampling;
  StopParams stop;
  RequestedSampling given;  // fields of `sampling` / `stop` the client set
  int priority = 0;
  std::string cache_salt;  // vLLM's (GenerateRequest::cache_salt)
  // vLLM's bad_words: tokenized as vLLM does (the word with its leading spaces stripped, and " " +
  // that when it is as many tokens with another first one) into sampling.bad_words_ids.
  std::vector<std::string> bad_words;
  std::optional<int64_t> history;  // the session's tokens, when the caller has looked them up
};

// NotFound unless `model` is empty or the served model's name.
absl::Status CheckModel(const ServiceContext& ctx, absl::string_view model);

// The number of tokens session `id` holds for `owner` (validating the id); NotFound when unknown.
// Blocks on the engine thread: call it on a worker thread.
absl::StatusOr<int64_t> SessionHistory(const ServiceContext& ctx, const std::string& id,
                                       const std::string& owner);

// Tokenizes a text prompt (bounded by ctx.max_prompt_bytes); errors start with `field`.
absl::StatusOr<std::vector<int32_t>> TokenizeText(const ServiceContext& ctx, absl::string_view text,
                                                  bool add_special_tokens, absl::string_view field);

// vLLM's bad_words as token sequences, appended to `out`: each word with its leading whitespace
// stripped, and " " + that when it tokenizes to as many tokens with another first token (the word
// inside a text, for tokenizers that mark a leading space). Errors name "bad_words[i]" (a word
// of no token or of more than kMaxBadWordTokens; no tokenizer).
absl::Status TokenizeBadWords(const ServiceContext& ctx, const std::vector<std::string>& words,
                              std::vector<std::vector<int32_t>>* out);

// InvalidArgument "field[i] = id is outside the vocabulary [0, vocab)" for the first bad id.
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int64_t vocab, absl::string_view field);

// The model's EOS id (else the tokenizer's first), and the tokenizer's further EOS ids as stop
// tokens unless ignore_eos.
void MergeEos(const ServiceContext& ctx, StopParams* stop);

// Builds the engine request: model check, session lookup, prompt, EOS merge and defaults (the
// engine validates the sampling and stop values on Submit). Blocks (tokenization, a session
// lookup): call it on a worker thread. `history` (optional) receives the session's token count.
absl::StatusOr<GenerateRequest> BuildRequest(const ServiceContext& ctx, RequestInput in,
                                             int64_t* history = nullptr);

}  // namespace linfer
