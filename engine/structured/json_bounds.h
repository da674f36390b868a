// JSON Schema's numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) as the
// ranges a bounded kNumber node holds (json_grammar.h Node::bounded): inclusive int64 ranges for
// integers, ranges in units of 10^-16 (NumberUnits) for numbers, as a reader's double sees them.
// Internal to the schema compiler.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/structured/json_grammar.h"
#include "nlohmann/json.hpp"

namespace linfer::structured {

// The first of minimum, maximum, exclusiveMinimum and exclusiveMaximum that `schema` has, or
// null.
const char* FirstBound(const nlohmann::ordered_json& schema);

// Whether the bounds are well formed (numbers; booleans only as draft 4's exclusive forms);
// InvalidArgument naming `path`.key otherwise.
absl::Status CheckBounds(const nlohmann::ordered_json& schema, const std::string& path);

// An integer schema's bounds as the integers [lo, hi] they admit, clamped to what the matcher
// writes (±kMaxIntegerMagnitude, 16 digits); InvalidArgument when no such integer is left.
absl::StatusOr<std::pair<int64_t, int64_t>> IntegerBounds(const nlohmann::ordered_json& schema,
                                                          const std::string& path);

// A number schema's bounds in units of 10^-16, as a reader checks them: a written decimal is
// within when the double it reads as is (minimum 0.1 admits "0.1"). What is written stays within
// ±2^53, where a reader that takes "9007199254740993" as an exact integer and one that takes it
// as a double agree; InvalidArgument when no number is left.
absl::StatusOr<std::pair<NumberUnits, NumberUnits>> NumberBounds(
    const nlohmann::ordered_json& schema, const std::string& path);

}  // namespace linfer::structured
