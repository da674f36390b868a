// Conversions for the gRPC API (request preparation itself is in request_builder.cc).
#include "server/convert.h"

#include "absl/strings/str_cat.h"
#include "common/replace_word.h"
#include "common/status_macros.h"
#include "engine/structured/json_grammar.h"

namespace linfer {

absl::Status GrpcTerms(const absl::Status& status) {
  std::string m(status.message());
  for (const auto& [engine, proto] :
       {std::pair<absl::string_view, absl::string_view>{"stop_strings", "stop.stop"},
        {"stop_token_ids", "stop.stop_token_ids"},
        {"max_tokens", "stop.max_tokens"},
        {"min_tokens", "stop.min_tokens"}}) {
    m = ReplaceWord(m, engine, proto);
  }
  return m == status.message() ? status : absl::Status(status.code(), m);
}

absl::StatusOr<GenerateRequest> ToEngineRequest(const v1::GenerateRequest& in, ServiceContext& ctx,
                                                const std::string& owner) {
  RequestInput r;
  r.model = in.model();
  r.session_id = in.session_id();
  r.owner = owner;
  r.priority = in.priority();
  r.cache_salt = in.cache_salt();
  switch (in.prompt_case()) {
    case v1::GenerateRequest::kText:
      r.prompt.kind = PromptInput::Kind::kText;
      r.prompt.text = in.text();
      if (in.has_add_special_tokens()) r.prompt.add_special_tokens = in.add_special_tokens();
      break;
    case v1::GenerateRequest::kTokenIds:
      r.prompt.kind = PromptInput::Kind::kTokenIds;
      r.prompt.token_ids.assign(in.token_ids().ids().begin(), in.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  const v1::SamplingParams& s = in.sampling();
  if (s.has_temperature()) r.sampling.temperature = s.temperature();
  if (s.has_top_k()) r.sampling.top_k = s.top_k();
  if (s.has_top_p()) r.sampling.top_p = s.top_p();
  if (s.has_min_p()) r.sampling.min_p = s.min_p();
  if (s.has_repetition_penalty()) r.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) r.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) r.sampling.frequency_penalty = s.frequency_penalty();
  for (const auto& [id, bias] : s.logit_bias()) r.sampling.logit_bias[id] = bias;
  if (s.has_seed()) r.sampling.seed = s.seed();
  if (s.has_logprobs()) r.sampling.logprobs = s.logprobs();
  if (s.allowed_token_ids_size() > static_cast<int>(kMaxAllowedTokenIds)) {  // before the copy
    return absl::InvalidArgumentError(absl::StrCat("sampling.allowed_token_ids: at most ",
                                                   kMaxAllowedTokenIds, " ids, got ",
                                                   s.allowed_token_ids_size()));
  }
  if (s.allowed_token_ids_size() > 0) {
    r.sampling.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(
        s.allowed_token_ids().begin(), s.allowed_token_ids().end());
  }
  if (s.logprob_token_ids_size() > static_cast<int>(kMaxLogprobTokenIds)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logprob_token_ids: at most ",
                                                   kMaxLogprobTokenIds, " ids, got ",
                                                   s.logprob_token_ids_size()));
  }
  r.sampling.logprob_token_ids.assign(s.logprob_token_ids().begin(), s.logprob_token_ids().end());
  if (s.bad_words_size() > static_cast<int>(kMaxBadWords / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.bad_words: at most ", kMaxBadWords / 2,
                                                   " words, got ", s.bad_words_size()));
  }
  for (const std::string& w : s.bad_words()) {
    if (w.empty() || w.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling.bad_words: each word must have 1 to ", kMaxStopStringBytes, " bytes"));
    }
    r.bad_words.push_back(w);
  }
  const v1::StopConditions& st = in.stop();
  r.stop.stop_strings.assign(st.stop().begin(), st.stop().end());
  if (st.stop_token_ids_size() > static_cast<int>(kMaxStopTokenIds)) {  // before the model's join
    return absl::InvalidArgumentError(absl::StrCat(
        "stop.stop_token_ids: at most ", kMaxStopTokenIds, " ids, got ", st.stop_token_ids_size()));
  }
  r.stop.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  if (st.has_max_tokens()) r.stop.max_tokens = st.max_tokens();
  if (st.has_min_tokens()) {
    if (st.has_max_tokens() && st.min_tokens() > st.max_tokens()) {  // as vLLM
      return absl::InvalidArgumentError(absl::StrCat(
          "min_tokens (", st.min_tokens(), ") must be at most max_tokens (", st.max_tokens(), ")"));
    }
    r.stop.min_tokens = st.min_tokens();
  }
  r.stop.ignore_eos = st.ignore_eos();
  r.stop.include_stop_str_in_output = st.include_stop_str_in_output();
  r.given = {s.has_temperature(),        s.has_top_p(),      s.has_top_k(), s.has_min_p(),
             s.has_repetition_penalty(), st.has_max_tokens()};
  std::shared_ptr<const structured::Grammar> format;
  if (in.output_format_case() == v1::GenerateRequest::kJsonSchema) {
    ASSIGN_OR_RETURN(format, structured::CompileJsonSchemaText(in.json_schema(), "json_schema"));
  } else if (in.output_format_case() == v1::GenerateRequest::kJsonObject && in.json_object()) {
    format = structured::JsonObjectGrammar();
  } else if (in.output_format_case() == v1::GenerateRequest::kRegex) {
    ASSIGN_OR_RETURN(format, structured::RegexGrammar(in.regex(), "regex"));
  }
  ASSIGN_OR_RETURN(GenerateRequest out, BuildRequest(ctx, std::move(r)));
  if (format) {
    ASSIGN_OR_RETURN(out.constraint, ctx.constraints.Make(*ctx.engine, ctx.tokenizer, format));
  }
  return out;
}

void AppendEvent(const TokenEvent& e, v1::GenerateResponse* out) {
  out->mutable_text()->append(e.text);
  if (e.token >= 0) {
    out->add_token_ids(e.token);
    if (!e.top_logprobs.empty() || e.logprob != 0) {
      v1::TokenLogprob* lp = out->add_logprobs();
      lp->set_token_id(e.token);
      lp->set_logprob(e.logprob);
      for (const auto& [id, p] : e.top_logprobs) {
        v1::TopLogprob* t = lp->add_top();
        t->set_token_id(id);
        t->set_logprob(p);
      }
    }
  }
  if (e.finish == Finish::kStop || e.finish == Finish::kLength) {
    out->set_finish_reason(std::string(FinishName(e.finish)));
    if (e.stop_token) out->set_stop_token_id(*e.stop_token);
    if (e.stop_string) out->set_stop_string(*e.stop_string);
  }
  if (e.finish != Finish::kNone) {
    v1::Usage* u = out->mutable_usage();
    u->set_prompt_tokens(e.usage.prompt_tokens);
    u->set_cached_tokens(e.usage.cached_tokens);
    u->set_completion_tokens(e.usage.completion_tokens);
    u->set_queue_seconds(e.usage.queue_seconds);
    u->set_ttft_seconds(e.usage.ttft_seconds);
    u->set_total_seconds(e.usage.total_seconds);
  }
}

v1::Session ToProto(const SessionInfo& info) {
  v1::Session s;
  s.set_session_id(info.id);
  s.set_tier(std::string(TierName(info.tier)));
  s.set_tokens(info.position);
  s.set_busy(info.busy);
  s.set_turns(info.turns);
  s.set_created_unix_ms(absl::ToUnixMillis(info.created));
  s.set_last_used_unix_ms(absl::ToUnixMillis(info.last_used));
  return s;
}

}  // namespace linfer
