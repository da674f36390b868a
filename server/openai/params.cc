// Parsing of the fields shared by completions and chat completions.
#include "server/openai/params.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/openai/structured_output.h"

namespace linfer::openai {
namespace {

constexpr double kHuge = std::numeric_limits<double>::max();

absl::Status ParseSampling(const Fields& f, CommonParams& p) {
  SamplingParams& s = p.sampling;
  ASSIGN_OR_RETURN(std::optional<double> temperature, f.Number("temperature", 0, kHuge));
  ASSIGN_OR_RETURN(std::optional<double> top_p, f.Number("top_p", -kHuge, kHuge));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.Int("top_k", -1, INT32_MAX));
  ASSIGN_OR_RETURN(std::optional<double> min_p, f.Number("min_p", -kHuge, kHuge));
  ASSIGN_OR_RETURN(std::optional<double> rep, f.Number("repetition_penalty", -kHuge, kHuge));
  ASSIGN_OR_RETURN(std::optional<double> presence, f.Number("presence_penalty", -2, 2));
  ASSIGN_OR_RETURN(std::optional<double> frequency, f.Number("frequency_penalty", -2, 2));
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, f.Int("seed", INT64_MIN, INT64_MAX));
  if (temperature) s.temperature = static_cast<float>(*temperature);
  if (top_p) s.top_p = static_cast<float>(*top_p);
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  if (min_p) s.min_p = static_cast<float>(*min_p);
  if (rep) s.repetition_penalty = static_cast<float>(*rep);
  if (presence) s.presence_penalty = static_cast<float>(*presence);
  if (frequency) s.frequency_penalty = static_cast<float>(*frequency);
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  p.given.temperature = temperature.has_value();
  p.given.top_p = top_p.has_value();
  p.given.top_k = top_k.has_value();
  p.given.min_p = min_p.has_value();
  p.given.repetition_penalty = rep.has_value();
  ASSIGN_OR_RETURN(const Json* bias, f.Object("logit_bias"));
  if (bias == nullptr) return absl::OkStatus();
  if (bias->size() > kMaxLogitBias) {  // before the copies each prompt and choice would hold
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: at most ", kMaxLogitBias, " tokens, got ", bias->size()));
  }
  for (const auto& [key, value] : bias->items()) {
    int32_t id = 0;
    // The decimal digits of an id, as OpenAI's tokenizers write them (no sign, space or leading 0).
    const bool canonical = !key.empty() && absl::c_all_of(key, absl::ascii_isdigit) &&
                           (key.size() == 1 || key[0] != '0');
    if (!canonical || !absl::SimpleAtoi(key, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: key ", Quote(key), " is not a token id"));
    }
    Fields entry(*bias, "logit_bias.");
    ASSIGN_OR_RETURN(std::optional<double> b, entry.Number(key, -100, 100));
    if (b) s.logit_bias[id] = static_cast<float>(*b);
  }
  return absl::OkStatus();
}

// The members of array `a` as token ids (non-negative int32; the vocabulary is checked later);
// errors name "key[i]".
absl::StatusOr<std::vector<int32_t>> TokenIdList(const Json& a, absl::string_view key) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::optional<int64_t> id = a[i].is_number_integer() ? AsInt64(a[i]) : std::nullopt;
    if (!id || *id < 0 || *id > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "[", i, "] = ", Dump(a[i]), " is not a token id"));
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// vLLM's allowed_token_ids (token ids; the engine checks them against the vocabulary) and
// bad_words (strings, tokenized by BuildRequest).
absl::Status ParseTokenRestrictions(const Fields& f, CommonParams& p) {
  ASSIGN_OR_RETURN(const Json* allowed, f.Array("allowed_token_ids"));
  if (allowed != nullptr) {
    if (allowed->empty()) {
      return absl::InvalidArgumentError(
          "allowed_token_ids: empty (give the ids that may be sampled, or leave it out)");
    }
    if (allowed->size() > kMaxAllowedTokenIds) {  // before each prompt's and choice's copy
      return absl::InvalidArgumentError(absl::StrCat(
          "allowed_token_ids: at most ", kMaxAllowedTokenIds, " ids, got ", allowed->size()));
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIdList(*allowed, "allowed_token_ids"));
    p.sampling.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  }
  ASSIGN_OR_RETURN(const Json* words, f.Array("bad_words"));
  if (words != nullptr) {
    if (words->size() > kMaxBadWords / 2) {  // each may tokenize two ways
      return absl::InvalidArgumentError(
          absl::StrCat("bad_words: at most ", kMaxBadWords / 2, " words, got ", words->size()));
    }
    for (size_t i = 0; i < words->size(); ++i) {
      const Json& w = (*words)[i];
      if (!w.is_string() || w.get_ref<const std::string&>().empty() ||
          w.get_ref<const std::string&>().size() > kMaxStopStringBytes) {
        return absl::InvalidArgumentError(absl::StrCat("bad_words[", i,
                                                       "]: expected a non-empty string of at most ",
                                                       kMaxStopStringBytes, " bytes"));
      }
      p.bad_words.push_back(w.get<std::string>());
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStopStrings(const Fields& f, StopParams& st) {
  if (const Json* stop = f.Get("stop"); stop != nullptr) {
    if (stop->is_string()) {
      if (!stop->get_ref<const std::string&>().empty()) st.stop_strings.push_back(*stop);
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        const Json& s = (*stop)[i];
        if (!s.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("stop[", i, "]: expected a string, got ", TypeName(s)));
        }
        if (!s.get_ref<const std::string&>().empty()) st.stop_strings.push_back(s);
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("stop: expected a string or an array of strings, got ", TypeName(*stop)));
    }
  }
  if (st.stop_strings.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop: at most ", kMaxStopStrings, " strings, got ", st.stop_strings.size()));
  }
  for (size_t i = 0; i < st.stop_strings.size(); ++i) {
    if (st.stop_strings[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "]: longer than ", kMaxStopStringBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Fields& f, Api api, CommonParams& p) {
  StopParams& st = p.stop;
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, f.Int("max_tokens", 1, INT32_MAX));
  std::optional<int64_t> max_completion;
  if (api == Api::kChat) {
    ASSIGN_OR_RETURN(max_completion, f.Int("max_completion_tokens", 1, INT32_MAX));
  }
  if (max_completion) max_tokens = max_completion;  // supersedes max_tokens
  if (max_tokens) st.max_tokens = static_cast<int>(*max_tokens);
  p.given.max_tokens = max_tokens.has_value();
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, f.Bool("ignore_eos"));
  ASSIGN_OR_RETURN(std::optional<bool> include_stop, f.Bool("include_stop_str_in_output"));
  ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, f.Int("min_tokens", 0, INT32_MAX));
  st.ignore_eos = ignore_eos.value_or(false);
  st.include_stop_str_in_output = include_stop.value_or(false);
  p.min_tokens = static_cast<int>(min_tokens.value_or(0));
  if (max_tokens && min_tokens && *min_tokens > *max_tokens) {  // as vLLM
    return absl::InvalidArgumentError(absl::StrCat(
        "min_tokens (", *min_tokens, ") must be at most max_tokens (", *max_tokens, ")"));
  }
  RETURN_IF_ERROR(ParseStopStrings(f, st));
  ASSIGN_OR_RETURN(const Json* ids, f.Array("stop_token_ids"));
  if (ids != nullptr && ids->size() > kMaxStopTokenIds) {  // before each prompt's copy
    return absl::InvalidArgumentError(
        absl::StrCat("stop_token_ids: at most ", kMaxStopTokenIds, " ids, got ", ids->size()));
  }
  if (ids != nullptr) {
    for (size_t i = 0; i < ids->size(); ++i) {
      if (!(*ids)[i].is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("stop_token_ids[", i, "]: expected an integer token id"));
      }
      const std::optional<int64_t> id = AsInt64((*ids)[i]);
      if (!id || *id < 0 || *id > INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("stop_token_ids[", i, "] = ", Dump((*ids)[i]), " is not a token id"));
      }
      st.stop_token_ids.push_back(static_cast<int32_t>(*id));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const Fields& f, Api api, CommonParams& p) {
  if (api == Api::kCompletions) {
    const Json* v = f.Get("logprobs");
    if (v != nullptr && v->is_boolean()) {  // vLLM's chat spelling; accept it here too
      p.logprobs = v->get<bool>();
    } else {
      ASSIGN_OR_RETURN(std::optional<int64_t> n, f.Int("logprobs", 0, 20));
      p.logprobs = n.has_value();
      p.top_logprobs = static_cast<int>(n.value_or(0));
    }
  } else {
    ASSIGN_OR_RETURN(std::optional<bool> want, f.Bool("logprobs"));
    ASSIGN_OR_RETURN(std::optional<int64_t> top, f.Int("top_logprobs", 0, 20));
    p.logprobs = want.value_or(false);
    if (top && *top > 0 && !p.logprobs) {
      return absl::InvalidArgumentError("top_logprobs: needs \"logprobs\": true");
    }
    p.top_logprobs = static_cast<int>(top.value_or(0));
  }
  if (p.logprobs) p.sampling.logprobs = p.top_logprobs;
  ASSIGN_OR_RETURN(std::optional<bool> as_ids, f.Bool("return_tokens_as_token_ids"));
  p.tokens_as_ids = as_ids.value_or(false);
  if (api == Api::kCompletions || api == Api::kChat) {
    ASSIGN_OR_RETURN(const Json* labels, f.Array("logprob_token_ids"));
    if (labels != nullptr) {
      if (labels->empty() || labels->size() > kMaxLogprobTokenIds) {
        return absl::InvalidArgumentError(absl::StrCat(
            "logprob_token_ids: 1 to ", kMaxLogprobTokenIds, " ids, got ", labels->size()));
      }
      if (!p.logprobs) {
        return absl::InvalidArgumentError(
            absl::StrCat("logprob_token_ids: needs ",
                         api == Api::kChat ? "\"logprobs\": true" : "\"logprobs\" (any count)"));
      }
      ASSIGN_OR_RETURN(p.sampling.logprob_token_ids, TokenIdList(*labels, "logprob_token_ids"));
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> prompt, f.Int("prompt_logprobs", 0, 20));
    if (prompt) p.prompt_logprobs = static_cast<int>(*prompt);
    ASSIGN_OR_RETURN(std::optional<bool> ids, f.Bool("return_token_ids"));
    p.return_token_ids = ids.value_or(false);
    ASSIGN_OR_RETURN(std::optional<int64_t> budget, f.Int("thinking_token_budget", -1, INT32_MAX));
    if (budget && *budget >= 0) p.thinking_budget = *budget;
  }
  return absl::OkStatus();
}

// The prompt's logprobs (prompt_logprobs, or echo with logprobs): computed once from the
// prompt's first token, for one choice. `what` names the field asking for them.
absl::Status CheckPromptLogprobs(const CommonParams& p, absl::string_view what) {
  if (p.n > 1) return absl::InvalidArgumentError(absl::StrCat(what, ", n must be 1"));
  if (!p.session_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ", not on a session (the prompt's logprobs start from its first token)"));
  }
  return absl::OkStatus();
}

absl::Status ParseStream(const Fields& f, CommonParams& p) {
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  p.stream = stream.value_or(false);
  ASSIGN_OR_RETURN(const Json* options, f.Object("stream_options"));
  if (options == nullptr) return absl::OkStatus();
  if (!p.stream) {
    return absl::InvalidArgumentError("stream_options: only allowed with \"stream\": true");
  }
  Fields o(*options, "stream_options.");
  ASSIGN_OR_RETURN(std::optional<bool> usage, o.Bool("include_usage"));
  ASSIGN_OR_RETURN(std::optional<bool> continuous, o.Bool("continuous_usage_stats"));
  p.include_usage = usage.value_or(false);
  p.continuous_usage = continuous.value_or(false);
  return absl::OkStatus();
}

absl::Status ParseUnsupported(const Fields& f, Api api, CommonParams& p) {
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, f.Int("best_of", 1, kMaxN));
  if (best_of && *best_of != p.n) {
    return absl::InvalidArgumentError("best_of: only best_of equal to n is supported");
  }
  if (api == Api::kCompletions) {
    ASSIGN_OR_RETURN(std::optional<std::string> suffix, f.String("suffix"));
    if (suffix && !suffix->empty()) {
      return absl::InvalidArgumentError("suffix: not supported");
    }
  }
  // vLLM's extra parameters this server does not implement, where they would change the output:
  // refused, never ignored.
  ASSIGN_OR_RETURN(std::optional<bool> beam, f.Bool("use_beam_search"));
  if (beam.value_or(false)) return absl::InvalidArgumentError("use_beam_search: not supported");
  ASSIGN_OR_RETURN(std::optional<double> length_penalty, f.Number("length_penalty", -kHuge, kHuge));
  if (length_penalty && *length_penalty != 1.0) {
    return absl::InvalidArgumentError(
        "length_penalty: only with beam search, which is not supported");
  }
  // Given with a value that asks for something: not null, not an empty list.
  auto given = [&f](const char* key) {
    const Json* v = f.Get(key);
    return v != nullptr && !v->is_null() && !(v->is_array() && v->empty());
  };
  if (given("logits_processors")) {
    return absl::InvalidArgumentError(
        "logits_processors: not supported (logit_bias, allowed_token_ids, bad_words and "
        "structured output are)");
  }
  if (api == Api::kChat) {
    // OpenAI's legacy function calling (before tools) and audio output.
    for (const char* key : {"functions", "function_call"}) {
      if (given(key)) {
        return absl::InvalidArgumentError(absl::StrCat(
            key,
            ": the legacy function-calling API is not supported (send tools and tool_choice)"));
      }
    }
    if (const Json* v = f.Get("modalities"); v != nullptr && !v->is_null()) {
      const bool text_only = v->is_array() && std::all_of(v->begin(), v->end(), [](const Json& m) {
                               return m.is_string() && m.get_ref<const std::string&>() == "text";
                             });
      if (!text_only) {
        return absl::InvalidArgumentError("modalities: only [\"text\"] is supported");
      }
    }
    if (const Json* v = f.Get("audio"); v != nullptr && !v->is_null()) {
      return absl::InvalidArgumentError("audio: audio output is not supported");
    }
  }
  if (const Json* v = f.Get("prompt_embeds"); v != nullptr && !v->is_null()) {
    return absl::InvalidArgumentError("prompt_embeds: not supported (send text or token ids)");
  }
  for (const char* key : {"skip_special_tokens", "spaces_between_special_tokens"}) {
    ASSIGN_OR_RETURN(std::optional<bool> v, f.Bool(key));
    if (v && !*v) {
      return absl::InvalidArgumentError(absl::StrCat(
          key,
          ": only true (the default) is supported; special tokens are left out of the text "
          "(their ids are in logprobs and token ids)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommonParams> ParseCommonParams(const Json& body, Api api,
                                               const HttpRequest& request) {
  CommonParams p;
  Fields f(body);
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model"));
  p.model = model.value_or("");
  ASSIGN_OR_RETURN(std::optional<int64_t> n, f.Int("n", 1, kMaxN));
  p.n = static_cast<int>(n.value_or(1));
  RETURN_IF_ERROR(ParseSampling(f, p));
  RETURN_IF_ERROR(ParseTokenRestrictions(f, p));
  RETURN_IF_ERROR(ParseStop(f, api, p));
  RETURN_IF_ERROR(ParseLogprobs(f, api, p));
  RETURN_IF_ERROR(ParseStream(f, p));
  RETURN_IF_ERROR(ParseUnsupported(f, api, p));
  ASSIGN_OR_RETURN(p.format, ParseOutputFormat(body));
  ASSIGN_OR_RETURN(std::optional<std::string> user, f.String("user"));
  ASSIGN_OR_RETURN(std::optional<std::string> session, f.String("session_id"));
  ASSIGN_OR_RETURN(std::optional<bool> create, f.Bool("create_session"));
  ASSIGN_OR_RETURN(std::optional<int64_t> priority, f.Int("priority", INT32_MIN, INT32_MAX));
  ASSIGN_OR_RETURN(std::optional<std::string> salt, f.String("cache_salt"));
  if (salt && (salt->empty() || salt->size() > kMaxCacheSaltBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_salt: must have 1 to ", kMaxCacheSaltBytes, " bytes, got ", salt->size()));
  }
  p.cache_salt = salt.value_or("");
  ASSIGN_OR_RETURN(std::optional<bool> echo, f.Bool("echo"));
  ASSIGN_OR_RETURN(p.add_special_tokens, f.Bool("add_special_tokens"));
  ASSIGN_OR_RETURN(p.truncate_prompt_tokens, f.Int("truncate_prompt_tokens", -1, INT32_MAX));
  ASSIGN_OR_RETURN(std::optional<std::string> side, f.String("truncation_side"));
  if (side && *side != "left" && *side != "right") {
    return absl::InvalidArgumentError(
        absl::StrCat("truncation_side: ", Quote(*side), " is not \"left\" or \"right\""));
  }
  p.truncate_keeps_start = side == "right";
  ASSIGN_OR_RETURN(std::optional<std::string> request_id, f.String("request_id"));
  if (request_id) {
    const bool printable = absl::c_all_of(
        *request_id, [](char c) { return absl::ascii_isprint(static_cast<unsigned char>(c)); });
    if (request_id->empty() || request_id->size() > 128 || !printable) {
      return absl::InvalidArgumentError(
          "request_id: 1 to 128 printable ASCII characters (it becomes the response's id)");
    }
  }
  p.request_id = request_id.value_or("");
  // vLLM's rule: the X-Request-Id header wins (its printable characters, at most 128).
  std::string header;
  for (const char c : request.Header("x-request-id").substr(0, 128)) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c))) header += c;
  }
  if (!header.empty()) p.request_id = std::move(header);
  if (api == Api::kChat) {
    ASSIGN_OR_RETURN(std::optional<bool> prompt_text, f.Bool("return_prompt_text"));
    p.return_prompt_text = prompt_text.value_or(false);
  }
  if (p.truncate_prompt_tokens == 0) {
    return absl::InvalidArgumentError(
        "truncate_prompt_tokens: must be at least 1 (the prompt's last tokens kept), or -1 "
        "(max_model_len)");
  }
  p.user = user.value_or("");
  p.session_id = session.value_or(request.Header("x-session-id"));
  p.create_session = create.value_or(false);
  p.priority = static_cast<int>(priority.value_or(0));
  p.echo = api == Api::kCompletions && echo.value_or(false);
  // The prompt's logprobs too (what scoring clients such as lm-evaluation-harness read).
  if (p.echo && p.logprobs) RETURN_IF_ERROR(CheckPromptLogprobs(p, "echo: with logprobs"));
  if (p.prompt_logprobs) {
    RETURN_IF_ERROR(CheckPromptLogprobs(p, "prompt_logprobs: with them"));
    if (p.stream) {
      return absl::InvalidArgumentError("prompt_logprobs: not with stream (as vLLM)");
    }
    if (p.echo && p.logprobs) {
      return absl::InvalidArgumentError(
          "prompt_logprobs: give it or echo with logprobs (the same logprobs), not both");
    }
  }
  if (p.truncate_prompt_tokens && !p.session_id.empty()) {
    return absl::InvalidArgumentError(
        "truncate_prompt_tokens: not with a session (the history stays in its state; only a "
        "prompt sent whole can be cut)");
  }
  if (p.truncate_prompt_tokens && p.echo) {
    return absl::InvalidArgumentError("truncate_prompt_tokens: not with echo");
  }
  if (p.create_session && p.session_id.empty()) {
    return absl::InvalidArgumentError("create_session: needs a session_id (or x-session-id)");
  }
  return p;
}

// `prompt`: a string, strings, token ids, or lists of token ids (one prompt each).
absl::StatusOr<std::vector<PromptInput>> ParsePrompts(const Json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return absl::InvalidArgumentError("prompt: required");
  std::vector<PromptInput> out;
  auto text = [&](const Json& s, std::string field) {
    PromptInput p;
    p.kind = PromptInput::Kind::kText;
    p.text = s.get<std::string>();
    p.text_field = std::move(field);
    out.push_back(std::move(p));
  };
  auto ids = [&](const Json& a, std::string field) -> absl::Status {
    PromptInput p;
    p.kind = PromptInput::Kind::kTokenIds;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::optional<int64_t> id = AsInt64(a[i]);
      if (!id || *id < INT32_MIN || *id > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: expected a token id"));
      }
      p.token_ids.push_back(static_cast<int32_t>(*id));
    }
    if (p.token_ids.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty"));
    p.ids_field = std::move(field);
    out.push_back(std::move(p));
    return absl::OkStatus();
  };
  const Json& v = *it;
  if (v.is_string()) {
    text(v, "prompt");
  } else if (v.is_array() && !v.empty() && v[0].is_number()) {
    RETURN_IF_ERROR(ids(v, "prompt"));
  } else if (v.is_array() && !v.empty() && v.size() <= kMaxPrompts) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string field = absl::StrCat("prompt[", i, "]");
      if (v[i].is_string()) {
        text(v[i], field);
      } else if (v[i].is_array()) {
        RETURN_IF_ERROR(ids(v[i], field));
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": expected a string or an array of token ids"));
      }
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: expected a string, token ids, or a non-empty array of at most ",
                     kMaxPrompts, " prompts"));
  }
  return out;
}

}  // namespace linfer::openai
