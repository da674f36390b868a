// The CLI's sampling and stop flags, shared by local `generate` (through the engine) and the
// client commands (sent to the server). A flag left unset takes the model's
// generation_config.json default, then the engine's, exactly as a server request would.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "linfer/v1/generation.pb.h"
#include "models/generation_config.h"

namespace linfer::cli {

// Local requests: sampling and stop fields from the flags, else `defaults`.
absl::Status FillSamplingFromFlags(const GenerationDefaults& defaults, GenerateRequest* request);
// Without --max_tokens, the default (generation_config.json's max_new_tokens) yields to the
// engine's limit and to the room the context leaves, as a server's default does.
void ClampDefaultMaxTokens(const EngineOptions& options, GenerateRequest* request);
// Server requests: only the flags that were given (the server applies the model's defaults).
void FillProtoFromFlags(v1::GenerateRequest* request);

}  // namespace linfer::cli
