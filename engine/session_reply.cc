// VisibleReplyTokens (see session_reply.h) and the engine's use of it: a session turn that a stop
// string ends gives its state back the visible reply only.
#include "engine/session_reply.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/seq.h"
#include "engine/state_blob.h"

namespace linfer {

std::vector<int32_t> VisibleReplyTokens(absl::Span<const int32_t> generated,
                                        const ReplyTrace& trace, const TextEncoder& encode,
                                        const ContinuationCheck& check) {
  const size_t n = std::min({generated.size(), trace.ends.size(), trace.settled.size()});
  // The most tokens whose text is out in full within the visible part.
  size_t kept = 0;
  for (size_t k = 0; k < n && trace.ends[k] <= trace.shown; ++k) {
    if (trace.settled[k]) kept = k + 1;
  }
  std::vector<int32_t> out(generated.begin(), generated.begin() + static_cast<ptrdiff_t>(kept));
  const size_t from = kept == 0 ? 0 : trace.ends[kept - 1];
  if (from >= trace.shown) return out;
  const absl::string_view rest = absl::string_view(trace.text).substr(from, trace.shown - from);
  if (encode) {
    absl::StatusOr<std::vector<int32_t>> ids = encode(rest);
    if (ids.ok() && !ids->empty() && check(kept, *ids, rest)) {
      out.insert(out.end(), ids->begin(), ids->end());
      return out;
    }
  }
  // The fewest generated tokens whose text covers the visible part.
  size_t k = kept;
  while (k < n && !(trace.ends[k] >= trace.shown && trace.settled[k])) ++k;
  const size_t cover = std::min(k + 1, generated.size());
  return {generated.begin(), generated.begin() + static_cast<ptrdiff_t>(cover)};
}

void Engine::TraceReply(Seq& s, const std::string& delta, const StopOutput& stop) {
  ReplyTrace& t = *s.trace;
  t.text += delta;
  t.ends.push_back(t.text.size());
  t.settled.push_back(s.detok->Settled());
  t.shown += stop.text.size();
  if (stop.finished()) return;
  const size_t k = s.generated.size();
  if (t.settled.back() && !s.stop->holding()) {
    t.clean = k;
    DropStateCopy(s.clean_state);
    return;
  }
  // Text is held back from this token on: the state now (the clean tokens in, this one not yet
  // fed) is where to go back to if a stop string turns out to begin in it. Not while only the
  // detokenizer holds bytes (a character split across tokens: every other token of some
  // scripts), which would copy the state that often: a stop string that then begins right
  // after such a character (or in it) stays in the state (TrimSessionReply finds no copy).
  if (!s.clean_state && t.clean + 1 == k && s.stop->holding()) KeepStateCopy(s, s.clean_state);
}

bool Engine::TrimSessionReply(Seq& s, linfer::Finish why, TokenEvent& event) {
  auto check = [&](size_t kept, absl::Span<const int32_t> ids, absl::string_view text) {
    std::vector<int32_t> context = s.session->text_tail;
    context.insert(context.end(), s.tokens.begin(), s.tokens.begin() + s.prompt_end);
    context.insert(context.end(), s.generated.begin(),
                   s.generated.begin() + static_cast<ptrdiff_t>(kept));
    if (context.size() > kMaxTextTail) {
      context.erase(context.begin(), context.end() - static_cast<ptrdiff_t>(kMaxTextTail));
    }
    std::unique_ptr<Detokenizer> d = options_.detokenizer(context);
    std::string out;
    for (const int32_t id : ids) out += d->Push(id);
    out += d->Flush();
    return out == text;
  };
  std::vector<int32_t> visible = VisibleReplyTokens(s.generated, *s.trace, options_.encoder, check);
  // The visible part of a cut token may encode to more tokens than were generated: never past
  // max_model_len (the request was admitted for its history, prompt and max_tokens), where the
  // fewest whole tokens covering the visible text do instead.
  const int64_t history = pool_.position(s.slot) - s.computed;
  if (history + s.prompt_end + static_cast<int64_t>(visible.size()) > options_.max_model_len) {
    visible = VisibleReplyTokens(s.generated, *s.trace, nullptr, check);
  }
  const size_t clean = s.trace->clean;
  s.trace.reset();
  absl::Cleanup drop_copy = [&] { DropStateCopy(s.clean_state); };
  auto begins_with = [&](size_t n) {
    return visible.size() >= n &&
           std::equal(s.generated.begin(), s.generated.begin() + static_cast<ptrdiff_t>(n),
                      visible.begin());
  };
  // The state holds the reply's tokens but the last: kept as they are where the visible ones
  // begin with them, else the state goes back to where the held-back text began.
  size_t keep = s.generated.size() - 1;
  if (!begins_with(keep)) {
    if (!s.clean_state || !begins_with(clean)) return false;  // no way back: the stop string stays
    if (absl::Status st = RestoreStateCopy(s, s.clean_state); !st.ok()) {
      Log(LogLevel::kError,
          absl::StrCat("session '", s.req.session_id,
                       "': taking a stop string out of its state: ", st.ToString()));
      return false;
    }
    keep = clean;
    s.computed = s.prompt_end + static_cast<int64_t>(clean);
  }
  s.tokens.resize(static_cast<size_t>(s.prompt_end) + keep);
  s.tokens.insert(s.tokens.end(), visible.begin() + static_cast<ptrdiff_t>(keep), visible.end());
  // Finish leaves the last token pending (or none when the state holds them all already).
  if (static_cast<int64_t>(s.tokens.size()) <= s.computed + 1) return false;
  const int32_t last = s.tokens.back();
  s.tokens.pop_back();
  s.req.prompt_logprobs.reset();  // (sent with the first token)
  s.refeed = Seq::Refeed{why, std::move(event), last};
  return true;
}

void Engine::EndRefeed(Seq& s, StepOutput& out, absl::Status error) {
  auto [why, event, last] = *std::move(s.refeed);
  s.refeed.reset();
  s.tokens.push_back(last);
  if (!error.ok()) {
    why = Finish::kError;
    s.detok.reset();  // its held-back bytes come after the stop string: not the text's
  }
  Finish(s, why, std::move(error), out, std::move(event));
}

}  // namespace linfer
