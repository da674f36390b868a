// LogRequest.
#include "server/request_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace linfer {

void LogRequest(absl::string_view api, RequestId id, absl::string_view session,
                const TokenEvent& e) {
  const Usage& u = e.usage;
  Log(e.finish == Finish::kError ? LogLevel::kWarning : LogLevel::kInfo,
      absl::StrFormat(
          "request %s #%d session=%s finish=%s prompt=%d cached=%d completion=%d "
          "queue=%.3fs ttft=%.3fs total=%.3fs%s",
          api, id, session.empty() ? "-" : session, FinishName(e.finish), u.prompt_tokens,
          u.cached_tokens, u.completion_tokens, u.queue_seconds, u.ttft_seconds, u.total_seconds,
          e.error.ok() ? "" : absl::StrCat(" error=", e.error.message().substr(0, 200))));
}

}  // namespace linfer
