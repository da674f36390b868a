// Structured output on the OpenAI API: `response_format` ({"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict", "description"}}) and vLLM's spellings
// (`structured_outputs: {"json": schema | "json_object": true | "choice": [strings]}`, the older
// `guided_json` / `guided_choice`) become
// a compiled Grammar at parse time (schema errors are 400s naming the place in the schema);
// ServiceContext::constraints makes a TokenConstraint of it when the request is built.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/structured/json_grammar.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

// The grammar a request body asks for, or null for free text. InvalidArgument naming the field:
// an unknown type, a missing schema, a keyword structured output cannot enforce, two ways of
// asking at once.
absl::StatusOr<std::shared_ptr<const structured::Grammar>> ParseOutputFormat(const Json& body);

// The Responses API's `text.format` (`field`): {"type": "text" | "json_object" | "json_schema",
// "name", "schema", "strict", "description"} — response_format with the json_schema object's
// members one level up. Null for text.
absl::StatusOr<std::shared_ptr<const structured::Grammar>> ParseTextFormat(
    const Json& format, const std::string& field);

}  // namespace linfer::openai
