// Python operators on interpreter values: arithmetic, comparison, `in`, indexing and slicing,
// with CPython's results and TypeError messages.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizer/jinja/interpreter.h"
#include "models/tokenizer/jinja/value.h"

namespace linfer::tokenizer::jinja {

// a <op> b for op in + - * / // % **.
absl::StatusOr<Value> BinaryOp(Interpreter& in, const std::string& op, const Value& a,
                               const Value& b);
// -a (negate) or +a.
absl::StatusOr<Value> UnaryOp(const Value& a, bool negate);
// Python ==.
bool Equals(const Value& a, const Value& b);
// Python a < b; TypeError for unordered types, UndefinedError for Undefined.
absl::StatusOr<bool> Less(const Value& a, const Value& b);
// Python `item in container`.
absl::StatusOr<bool> Contains(Interpreter& in, const Value& container, const Value& item);
// obj[index] for a list or str with an int index; Undefined when out of range.
absl::StatusOr<Value> IndexSequence(Interpreter& in, const Value& obj, int64_t index);
// obj[start:stop:step] for a list or str (Undefined bounds are None).
absl::StatusOr<Value> SliceSequence(Interpreter& in, const Value& obj, const Value& start,
                                    const Value& stop, const Value& step);

}  // namespace linfer::tokenizer::jinja
