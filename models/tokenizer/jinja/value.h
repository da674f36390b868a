// The dynamic value of the Jinja interpreter: Python's None, bool, int, float, str (with
// markupsafe's Markup flag), list/tuple, dict (insertion-ordered), jinja's namespace and
// Undefined, and callables. Containers are immutable once built and shared by pointer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer::tokenizer::jinja {

class Value;
class Interpreter;
struct ListData;
struct DictData;
struct NamespaceData;
struct CallableData;

// Arguments of a call: positional, then keyword arguments in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
  };

  Value() = default;  // Undefined without a hint.
  static Value Undefined(std::string hint, bool unsafe = false);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s, bool markup = false);
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(std::shared_ptr<const DictData> dict);
  static Value Namespace(std::shared_ptr<NamespaceData> ns);
  static Value Callable(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return flag_; }
  int64_t int_value() const { return num_.i; }  // also 0/1 for bools
  double float_value() const { return num_.f; }
  // As a Python number: int/bool widen to double.
  double AsDouble() const;
  const std::string& str() const;  // string text or Undefined hint ("" without one)
  bool is_markup() const { return is_string() && flag_; }
  bool is_tuple() const { return is_list() && flag_; }
  bool is_unsafe_undefined() const { return is_undefined() && flag_; }
  const std::vector<Value>& list() const;
  const DictData& dict() const { return *static_cast<const DictData*>(ptr_.get()); }
  NamespaceData& ns() const { return *static_cast<NamespaceData*>(ptr_.get()); }
  const CallableData& callable() const { return *static_cast<const CallableData*>(ptr_.get()); }
  // Nesting depth of containers (0 for scalars), bounded at construction by the interpreter.
  int depth() const;
  // Identity for the `sameas` test: same object for containers, equal value for scalars.
  bool SameAs(const Value& other) const;

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // Python type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
  const char* TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool flag_ = false;  // bool value; Markup for strings; tuple for lists; unsafe Undefined
  union {
    int64_t i;
    double f;
  } num_ = {0};
  // The string (also an Undefined's hint), ListData, DictData, NamespaceData or CallableData.
  std::shared_ptr<void> ptr_;
};

struct ListData {
  std::vector<Value> items;
  int depth = 1;
};

// An insertion-ordered dict. String keys are indexed; other keys are searched linearly.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  absl::flat_hash_map<std::string, size_t> string_index;
  int depth = 1;

  // Inserts or replaces (keeping the first position, as Python does).
  void Set(Value key, Value value);
  // The value for `key`, or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(absl::string_view key) const;
};

// jinja2's namespace(): a mutable attribute bag (assigned with {% set ns.attr = ... %}).
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  bool read_only = false;  // a for-loop's `loop` (jinja2's LoopContext takes no attributes)
  const Value* Find(absl::string_view name) const;
  void Set(const std::string& name, Value value);
};

struct CallableData {
  std::string name;
  NativeFunction fn;
};

}  // namespace linfer::tokenizer::jinja
