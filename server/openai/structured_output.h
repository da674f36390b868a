// Structured output on the OpenAI API: `response_format` ({"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict", "description"}}) and vLLM's spellings
// (`structured_outputs: {"json": schema | "json_object": true}`, the older `guided_json`) become
// a compiled Grammar at parse time (schema errors are 400s naming the place in the schema), and a
// TokenConstraint per choice when the request is built.
#pragma once

#include <memory>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "server/openai/json_fields.h"
#include "server/service_context.h"

namespace linfer::openai {

// The grammar a request body asks for, or null for free text. InvalidArgument naming the field:
// an unknown type, a missing schema, a keyword structured output cannot enforce, two ways of
// asking at once.
absl::StatusOr<std::shared_ptr<const structured::Grammar>> ParseOutputFormat(const Json& body);

// Makes the engine's constraints; the vocabulary's byte index is built on first use (once per
// server, from the tokenizer: ~0.1–0.5 s for a 250k vocabulary) and shared. Thread-safe.
class ConstraintMaker {
 public:
  explicit ConstraintMaker(const ServiceContext* ctx) : ctx_(ctx) {}
  // FailedPrecondition when the server has no tokenizer (token-id models cannot take a format).
  absl::StatusOr<std::shared_ptr<TokenConstraint>> Make(
      std::shared_ptr<const structured::Grammar> grammar);

 private:
  const ServiceContext* ctx_;
  absl::once_flag once_;
  std::shared_ptr<const structured::TokenIndex> index_;
};

}  // namespace linfer::openai
