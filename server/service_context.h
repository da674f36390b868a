// What the gRPC services share: the engine, the tokenizer (optional), metrics and API keys.
#pragma once

#include <atomic>
#include <string>

#include "engine/engine.h"
#include "models/tokenizer/tokenizer.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace linfer {

struct ServiceContext {
  Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  Metrics* metrics = nullptr;
  const ApiKeys* keys = nullptr;
  std::string model_name;
  std::atomic<bool> draining{false};
};

}  // namespace linfer
