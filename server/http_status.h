// The one place absl::Status becomes an HTTP status and an OpenAI-shaped error body (beside
// grpc_status.h for the gRPC side).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/http/http_server.h"

namespace linfer {

// 400 invalid, 401 unauthenticated, 403, 404 not found, 409 busy / exists, 429 queue full,
// 499 cancelled, 503 unavailable / draining, 504 deadline, 500 otherwise.
int HttpStatusFor(absl::StatusCode code);

// The request field an error message names ("temperature must be ...", "messages[2].role: ...",
// "stop[1]: ..."), or "" when it names none.
std::string ErrorParam(absl::string_view message);

// JsonError(HttpStatusFor(code), message, ErrorParam(message)).
HttpResponse ErrorResponse(const absl::Status& status);

}  // namespace linfer
