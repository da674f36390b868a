// One log line per finished request (`linfer serve --log_requests`), shared by the gRPC and HTTP
// front ends.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "engine/request.h"

namespace linfer {

// "request <api> #<id> session=<id> finish=<reason> prompt=<n> cached=<n> completion=<n>
//  queue=<s> ttft=<s> total=<s> [error=<message>]"
void LogRequest(absl::string_view api, RequestId id, absl::string_view session,
                const TokenEvent& final_event);

}  // namespace linfer
