// absl::Status → HTTP status and OpenAI error body.
#include "server/http_status.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace linfer {

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorParam(absl::string_view message) {
  size_t i = 0;
  while (i < message.size() && (absl::ascii_isalnum(message[i]) || message[i] == '_' ||
                                message[i] == '.' || message[i] == '[' || message[i] == ']')) {
    ++i;
  }
  if (i == 0 || i == message.size()) return "";
  const absl::string_view name = message.substr(0, i);
  const absl::string_view after = message.substr(i);
  // "field: ...", "field must ...", "field[3] = ...", "field 5000 exceeds ...", "a_field may
  // only ..." name a field; a sentence does not.
  const bool punctuated =
      absl::StrContains(name, '_') || absl::StrContains(name, '[') || absl::StrContains(name, '.');
  const bool field_like = punctuated || absl::ascii_islower(name[0]);
  if (!field_like) return "";
  if (absl::StartsWith(after, ":") || absl::StartsWith(after, " must ") ||
      absl::StartsWith(after, " = ") || (punctuated && absl::StartsWith(after, " may only "))) {
    return std::string(name);
  }
  absl::string_view rest = after.substr(1);  // after[0] is a space or other punctuation
  const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
  if (after[0] == ' ' && digits > 0 && absl::StartsWith(rest.substr(digits), " exceeds ")) {
    return std::string(name);
  }
  return "";
}

HttpResponse ErrorResponse(const absl::Status& status) {
  return JsonError(HttpStatusFor(status.code()), status.message(), ErrorParam(status.message()));
}

}  // namespace linfer
