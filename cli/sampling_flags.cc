// Sampling / stop flags → GenerateRequest (local) or v1::GenerateRequest (remote).
#include "cli/sampling_flags.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace linfer::cli {

// --stop may be repeated and each value may list several strings separated by commas; C escapes
// (\n, \t, \x2c for a comma) are decoded.
struct StopStrings {
  std::vector<std::string> values;
};

bool AbslParseFlag(absl::string_view text, StopStrings* out, std::string* error) {
  // absl hands every occurrence a fresh value, so the occurrences so far are kept here
  // (flags are parsed once, on the main thread).
  static std::vector<std::string>* seen = new std::vector<std::string>();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::string value;
    if (!absl::CUnescape(part, &value, error)) return false;
    seen->push_back(std::move(value));
  }
  out->values = *seen;
  return true;
}

std::string AbslUnparseFlag(const StopStrings& s) {
  std::vector<std::string> escaped;
  for (const std::string& v : s.values) escaped.push_back(absl::CEscape(v));
  return absl::StrJoin(escaped, ",");
}

}  // namespace linfer::cli

ABSL_FLAG(std::optional<int>, max_tokens, std::nullopt,
          "Tokens to generate (default: the model's max_new_tokens, else 16)");
ABSL_FLAG(std::optional<double>, temperature, std::nullopt,
          "Sampling temperature; 0 is greedy (default: the model's generation_config, else 1)");
ABSL_FLAG(std::optional<double>, top_p, std::nullopt,
          "Nucleus sampling: keep the smallest set of tokens with this mass (default: the "
          "model's, else 1)");
ABSL_FLAG(std::optional<int>, top_k, std::nullopt,
          "Sample among the k most likely tokens (0: all; default: the model's, else 0)");
ABSL_FLAG(std::optional<double>, min_p, std::nullopt,
          "Drop tokens below min_p × the top token's probability (default: the model's, else 0)");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "Sampling seed (default: a random one)");
ABSL_FLAG(linfer::cli::StopStrings, stop, linfer::cli::StopStrings{},
          "Stop string(s): repeat the flag or separate with commas; C escapes such as \\n work");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past the model's end-of-sequence token");

namespace linfer::cli {

absl::Status FillSamplingFromFlags(const GenerationDefaults& d, GenerateRequest* r) {
  SamplingParams& s = r->sampling;
  auto pick = [](auto flag, auto fallback, auto engine_default) {
    return flag       ? static_cast<decltype(engine_default)>(*flag)
           : fallback ? static_cast<decltype(engine_default)>(*fallback)
                      : engine_default;
  };
  s.temperature = pick(absl::GetFlag(FLAGS_temperature), d.temperature, s.temperature);
  s.top_p = pick(absl::GetFlag(FLAGS_top_p), d.top_p, s.top_p);
  s.top_k = pick(absl::GetFlag(FLAGS_top_k), d.top_k, s.top_k);
  s.min_p = pick(absl::GetFlag(FLAGS_min_p), d.min_p, s.min_p);
  s.repetition_penalty = pick(std::optional<float>(), d.repetition_penalty, s.repetition_penalty);
  if (absl::GetFlag(FLAGS_seed)) s.seed = *absl::GetFlag(FLAGS_seed);
  r->stop.max_tokens = pick(absl::GetFlag(FLAGS_max_tokens), d.max_new_tokens, r->stop.max_tokens);
  r->stop.stop_strings = absl::GetFlag(FLAGS_stop).values;
  r->stop.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  if (!r->stop.ignore_eos) {
    for (int32_t id : d.eos_token_ids) r->stop.stop_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

void ClampDefaultMaxTokens(const EngineOptions& o, GenerateRequest* r) {
  if (absl::GetFlag(FLAGS_max_tokens)) return;
  const int64_t room =
      std::max<int64_t>(1, o.max_model_len - static_cast<int64_t>(r->prompt.size()));
  r->stop.max_tokens =
      static_cast<int>(std::min<int64_t>({r->stop.max_tokens, o.max_new_tokens, room}));
}

void FillProtoFromFlags(v1::GenerateRequest* r) {
  v1::SamplingParams* s = r->mutable_sampling();
  if (auto v = absl::GetFlag(FLAGS_temperature)) s->set_temperature(static_cast<float>(*v));
  if (auto v = absl::GetFlag(FLAGS_top_p)) s->set_top_p(static_cast<float>(*v));
  if (auto v = absl::GetFlag(FLAGS_top_k)) s->set_top_k(*v);
  if (auto v = absl::GetFlag(FLAGS_min_p)) s->set_min_p(static_cast<float>(*v));
  if (auto v = absl::GetFlag(FLAGS_seed)) s->set_seed(*v);
  v1::StopConditions* stop = r->mutable_stop();
  for (const std::string& v : absl::GetFlag(FLAGS_stop).values) stop->add_stop(v);
  if (auto v = absl::GetFlag(FLAGS_max_tokens)) stop->set_max_tokens(*v);
  stop->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
}

}  // namespace linfer::cli
