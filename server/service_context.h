// What the gRPC services and the OpenAI API share: the engine, the tokenizer (optional), metrics,
// API keys and structured output's token index.
#pragma once

#include <atomic>
#include <string>

#include "common/worker_pool.h"
#include "engine/engine.h"
#include "models/generation_config.h"
#include "models/tokenizer/tokenizer.h"
#include "server/auth.h"
#include "server/constraint_maker.h"
#include "server/metrics.h"

namespace linfer {

struct ServiceContext {
  Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  Metrics* metrics = nullptr;
  const ApiKeys* keys = nullptr;
  std::string model_name;
  GenerationDefaults defaults;  // the model's generation_config.json
  // Request preparation (parsing, tokenization, template rendering) runs here, never on the
  // gRPC callback or HTTP event-loop threads.
  WorkerPool* workers = nullptr;
  // The Sessions and Models unary RPCs run here: never queued behind prompts being tokenized
  // (six 15 MiB prompts held a 4-thread pool for seconds, and Models.Info with it).
  WorkerPool* control = nullptr;
  int64_t max_prompt_bytes = 16 << 20;   // longer text prompts are refused
  int64_t max_message_bytes = 16 << 20;  // gRPC's cap on a message either way
  bool log_requests = false;             // one log line per finished request
  std::atomic<bool> draining{false};
  ConstraintMaker constraints;  // structured output (both front ends)
};

}  // namespace linfer
