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

// "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
// "overloaded_error" (a full queue, answered 529; a draining server, 503), "timeout_error",
// else "api_error".
std::string AnthropicErrorType(absl::StatusCode code);
HttpResponse AnthropicErrorResponse(const absl::Status& status);

}  // namespace linfer::openai
