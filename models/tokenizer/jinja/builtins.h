// The engine's builtins: global functions (range, dict, namespace, raise_exception,
// strftime_now), filters, tests, and the Python methods of str, dict and list values.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizer/jinja/interpreter.h"
#include "models/tokenizer/jinja/value.h"

namespace linfer::tokenizer::jinja {

// The global function `name`, or Undefined when there is none.
Value GlobalFunction(const std::string& name);

// Filter `name` applied to `v` (jinja2's filters, with transformers' `tojson`).
absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& v,
                                 CallArgs& args);
// Filters of filters.cc (strings and numbers) and filters_seq.cc (sequences); nullopt-like
// NotFound when the name is not theirs.
absl::StatusOr<Value> CallTextFilter(Interpreter& in, const std::string& name, const Value& v,
                                     CallArgs& args);
absl::StatusOr<Value> CallSequenceFilter(Interpreter& in, const std::string& name, const Value& v,
                                         CallArgs& args);

// Test `name` applied to `v` (jinja2.tests).
absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& v,
                              CallArgs& args);

// The Python attribute `name` of a str, dict or list as a bound method; Undefined (unsafe, as
// jinja2's ImmutableSandboxedEnvironment) for mutating methods; nullopt when there is none.
std::optional<Value> BoundMethod(const Value& obj, const std::string& name);

}  // namespace linfer::tokenizer::jinja
