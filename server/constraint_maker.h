// The engine's structured-output constraints for both front ends: a compiled Grammar plus the
// vocabulary's byte index, built on first use (once per server, from the tokenizer: ~0.1-0.5 s
// for a 250k vocabulary) and shared by every request. Thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer {

class ConstraintMaker {
 public:
  using ByteTable = std::vector<std::optional<std::string>>;
  // The vocabulary's raw bytes (Tokenizer::TokenByteTable over the model's vocabulary), built on
  // first use and shared: structured output's index and the logprobs' "bytes" read it. Null
  // without a tokenizer.
  std::shared_ptr<const ByteTable> TokenBytes(const Engine& engine,
                                              const tokenizer::Tokenizer* tokenizer);

  // FailedPrecondition when there is no tokenizer (a token-id server cannot constrain text).
  // `engine` gives the model's vocabulary size.
  absl::StatusOr<std::shared_ptr<TokenConstraint>> Make(
      const Engine& engine, const tokenizer::Tokenizer* tokenizer,
      std::shared_ptr<const structured::Grammar> grammar);

 private:
  absl::once_flag once_, bytes_once_;
  std::shared_ptr<const structured::TokenIndex> index_;
  std::shared_ptr<const ByteTable> bytes_;
};

}  // namespace linfer
