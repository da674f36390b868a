// Request preparation shared by the gRPC and OpenAI front ends.
#include "server/request_builder.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/session_store.h"

namespace linfer {

std::string Quote(absl::string_view client_text, size_t max_bytes) {
  const absl::string_view cut = client_text.substr(0, max_bytes);
  return absl::StrCat("'", absl::CHexEscape(cut), client_text.size() > max_bytes ? "…" : "", "'");
}

void ApplyGenerationDefaults(const GenerationDefaults& d, const RequestedSampling& given,
                             GenerateRequest* r) {
  if (!given.temperature && d.temperature) r->sampling.temperature = *d.temperature;
  if (!given.top_p && d.top_p) r->sampling.top_p = *d.top_p;
  if (!given.top_k && d.top_k) r->sampling.top_k = *d.top_k;
  if (!given.min_p && d.min_p) r->sampling.min_p = *d.min_p;
  if (!given.repetition_penalty && d.repetition_penalty) {
    r->sampling.repetition_penalty = *d.repetition_penalty;
  }
  if (!given.max_tokens && d.max_new_tokens) r->stop.max_tokens = *d.max_new_tokens;
  if (!r->stop.ignore_eos) {
    for (int32_t id : d.eos_token_ids) {
      const bool known = id == r->stop.eos_token_id ||
                         std::find(r->stop.stop_token_ids.begin(), r->stop.stop_token_ids.end(),
                                   id) != r->stop.stop_token_ids.end();
      if (!known) r->stop.stop_token_ids.push_back(id);
    }
  }
}

absl::Status CheckModel(const ServiceContext& ctx, absl::string_view model) {
  if (model.empty() || model == ctx.model_name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model ", Quote(model), " is not served here (this server serves '", ctx.model_name, "')"));
}

absl::StatusOr<int64_t> SessionHistory(const ServiceContext& ctx, const std::string& id,
                                       const std::string& owner) {
  RETURN_IF_ERROR(SessionStore::ValidateId(id));
  ASSIGN_OR_RETURN(SessionInfo info, ctx.engine->SessionForTurn(id, owner));
  return info.position;
}

absl::StatusOr<std::vector<int32_t>> TokenizeText(const ServiceContext& ctx, absl::string_view text,
                                                  bool add_special_tokens,
                                                  absl::string_view field) {
  if (ctx.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": this model has no tokenizer; send prompt token ids instead"));
  }
  if (static_cast<int64_t>(text.size()) > ctx.max_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", text.size(),
                                                   " bytes is more than this server accepts (",
                                                   ctx.max_prompt_bytes, ")"));
  }
  absl::StatusOr<std::vector<int32_t>> ids = ctx.tokenizer->Encode(text, add_special_tokens);
  if (!ids.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", ids.status().message()));
  return ids;
}

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int64_t vocab, absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizeBadWords(const ServiceContext& ctx, const std::vector<std::string>& words,
                              std::vector<std::vector<int32_t>>* out) {
  if (words.empty()) return absl::OkStatus();
  if (ctx.tokenizer == nullptr) {
    return absl::InvalidArgumentError("bad_words: this model has no tokenizer to spell them with");
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string field = absl::StrCat("bad_words[", i, "]");
    const absl::string_view word = absl::StripLeadingAsciiWhitespace(words[i]);
    if (word.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": only whitespace"));
    ASSIGN_OR_RETURN(std::vector<int32_t> plain, TokenizeText(ctx, word, false, field));
    ASSIGN_OR_RETURN(std::vector<int32_t> spaced,
                     TokenizeText(ctx, absl::StrCat(" ", word), false, field));
    if (plain.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": no tokens"));
    if (plain.size() > kMaxBadWordTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", plain.size(), " tokens, at most ", kMaxBadWordTokens));
    }
    const bool another =
        !spaced.empty() && spaced.size() == plain.size() && spaced.front() != plain.front();
    out->push_back(std::move(plain));
    if (another) out->push_back(std::move(spaced));
  }
  return absl::OkStatus();
}

// The tokenizer's end ids the model can produce (others were warned about at load), once each.
void MergeEos(const ServiceContext& ctx, StopParams* stop) {
  stop->eos_token_id = ctx.engine->model().config().eos_token_id;
  if (ctx.tokenizer == nullptr) return;
  const int64_t vocab = ctx.engine->model().vocab_size();
  for (int32_t eos : ctx.tokenizer->special_tokens().eos_ids) {
    if (eos < 0 || eos >= vocab) continue;
    if (!stop->eos_token_id) {
      stop->eos_token_id = eos;
    } else if (eos != *stop->eos_token_id && !stop->ignore_eos &&
               std::find(stop->stop_token_ids.begin(), stop->stop_token_ids.end(), eos) ==
                   stop->stop_token_ids.end()) {
      stop->stop_token_ids.push_back(eos);
    }
  }
}

absl::StatusOr<GenerateRequest> BuildRequest(const ServiceContext& ctx, RequestInput in,
                                             int64_t* history) {
  RETURN_IF_ERROR(CheckModel(ctx, in.model));
  RETURN_IF_ERROR(CheckPriority(ctx.engine->options(), in.priority));  // before any session work
  GenerateRequest r;
  r.session_id = std::move(in.session_id);
  r.owner = std::move(in.owner);
  r.priority = in.priority;
  r.cache_salt = std::move(in.cache_salt);
  int64_t held = 0;
  if (in.history) {
    held = *in.history;
  } else if (!r.session_id.empty()) {
    ASSIGN_OR_RETURN(held, SessionHistory(ctx, r.session_id, r.owner));
  }
  if (history != nullptr) *history = held;
  if (!r.session_id.empty()) r.session_history = held;  // the engine checks it at admission
  PromptInput& p = in.prompt;
  switch (p.kind) {
    case PromptInput::Kind::kText: {
      const bool special = p.add_special_tokens.value_or(held == 0);
      ASSIGN_OR_RETURN(r.prompt, TokenizeText(ctx, p.text, special, p.text_field));
      break;
    }
    case PromptInput::Kind::kTokenIds:
      RETURN_IF_ERROR(CheckTokenIds(p.token_ids, ctx.engine->model().vocab_size(), p.ids_field));
      r.prompt = std::move(p.token_ids);
      break;
    case PromptInput::Kind::kNone:
      if (r.session_id.empty()) return absl::InvalidArgumentError(p.missing);
      break;
  }
  if (in.truncate_prompt_tokens) {
    const int64_t keep = *in.truncate_prompt_tokens < 0 ? ctx.engine->options().max_model_len
                                                        : *in.truncate_prompt_tokens;
    if (static_cast<int64_t>(r.prompt.size()) > keep && in.truncate_keeps_start) {
      r.prompt.resize(static_cast<size_t>(keep));
    } else if (static_cast<int64_t>(r.prompt.size()) > keep) {
      r.prompt.erase(r.prompt.begin(), r.prompt.end() - keep);
    }
  }
  r.sampling = std::move(in.sampling);
  if (const auto& allowed = r.sampling.allowed_token_ids; allowed != nullptr) {
    // Named by the client's index, then sorted once for every copy of the request.
    RETURN_IF_ERROR(CheckTokenIds(*allowed, ctx.engine->model().vocab_size(), "allowed_token_ids"));
    std::vector<int32_t> sorted = *allowed;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    r.sampling.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(std::move(sorted));
  }
  RETURN_IF_ERROR(TokenizeBadWords(ctx, in.bad_words, &r.sampling.bad_words_ids));
  r.stop = std::move(in.stop);
  MergeEos(ctx, &r.stop);
  ApplyGenerationDefaults(ctx.defaults, in.given, &r);
  if (!in.given.max_tokens && ctx.defaults.max_new_tokens) {
    // generation_config's max_new_tokens is a default, not a demand: it yields to this server's
    // limit and to the room the context leaves (it used to fail every request that gave none).
    const EngineOptions& eo = ctx.engine->options();
    const int64_t room =
        std::max<int64_t>(1, eo.max_model_len - held - static_cast<int64_t>(r.prompt.size()));
    r.stop.max_tokens =
        static_cast<int>(std::min<int64_t>({r.stop.max_tokens, eo.max_new_tokens, room}));
  }
  return r;
}

}  // namespace linfer
