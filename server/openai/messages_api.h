// Anthropic's Messages API on the OpenAI-compatible HTTP port: the formatter and the error shape
// ({"type": "error", "error": {"type": "invalid_request_error", "message": ...}}). The handlers are
// OpenAiApi::CreateMessage and CountMessageTokens (api_messages.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/http/http_server.h"
#include "server/openai/responses.h"

namespace linfer::openai {

std::unique_ptr<Formatter> MakeMessagesFormatter(FormatOptions options);

// By HTTP status: "invalid_request_error" (400, 409), "authentication_error", "permission_error",
// "not_found_error", "request_too_large" (413), "overloaded_error" (529, and 503 when draining),
// "timeout_error", else "api_error".
std::string AnthropicErrorType(int http_status);
// {"type": "error", "error": {"type", "message"}} with `http_status`.
HttpResponse AnthropicError(int http_status, absl::string_view message);
// A status as the API answers it (a full queue, ResourceExhausted, is its 529).
HttpResponse AnthropicErrorResponse(const absl::Status& status);

}  // namespace linfer::openai
