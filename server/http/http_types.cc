// JsonError: OpenAI-shaped error bodies for every HTTP error.
#include "nlohmann/json.hpp"
#include "server/http/http_server.h"

namespace linfer {
namespace {

const char* DefaultType(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

HttpResponse JsonError(int status, absl::string_view message, absl::string_view param,
                       absl::string_view type) {
  nlohmann::json e = {
      {"message", std::string(message)},
      {"type", type.empty() ? std::string(DefaultType(status)) : std::string(type)},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param))},
      {"code", status}};
  HttpResponse r;
  r.status = status;
  r.body =
      nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  return r;
}

}  // namespace linfer
