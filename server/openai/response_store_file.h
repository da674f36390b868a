// The stored responses in a file, so that a graceful restart with a session disk directory keeps
// them: GET and previous_response_id work after it, and their states (which the engine writes to
// the disk tier with every session) are continued as before.
//
// Format (JSON, version 1): {"version": 1, "turns": [{"previous": INDEX | -1, "messages": [...]}],
// "responses": [{"owner", "id", "response", "input_items", "turn": INDEX | -1, "instructions",
// "tools", "session_id", "position", "pending"}]}, the responses least recently used first. A
// conversation turn shared by several responses is written once. Written atomically (a
// temporary file, fsync, rename; mode 0600).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/openai/response_store.h"

namespace linfer::openai {

absl::Status SaveResponses(const std::string& path, const std::vector<OwnedResponse>& responses);

// The responses in the file, least recently used first. NotFound when there is no file;
// FailedPrecondition when it is larger than `max_bytes` (or not a regular file); DataLoss naming
// the file and the place when it is not one this function wrote.
absl::StatusOr<std::vector<OwnedResponse>> LoadResponses(const std::string& path,
                                                         int64_t max_bytes);

}  // namespace linfer::openai
