// linfer.v1 protobuf ↔ engine structs (the engine never sees protobuf).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/session_store.h"
#include "linfer/v1/generation.pb.h"
#include "linfer/v1/sessions.pb.h"
#include "server/request_builder.h"
#include "server/service_context.h"

namespace linfer {

// Validates and converts through BuildRequest; tokenizes a text prompt. Errors are InvalidArgument
// naming the field, NotFound for an unknown model or session. Blocks (tokenization, a session
// lookup): call it on a worker thread.
// `status` with the engine's field names restated as the proto's (stop_strings is stop.stop,
// stop_token_ids stop.stop_token_ids, max_tokens stop.max_tokens).
absl::Status GrpcTerms(const absl::Status& status);

absl::StatusOr<GenerateRequest> ToEngineRequest(const v1::GenerateRequest& in, ServiceContext& ctx,
                                                const std::string& owner);

// Appends a token event to a response message (several events may share one message).
void AppendEvent(const TokenEvent& event, v1::GenerateResponse* out);

v1::Session ToProto(const SessionInfo& info);

}  // namespace linfer
