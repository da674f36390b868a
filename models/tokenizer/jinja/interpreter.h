// Tree-walking evaluator for parsed templates with jinja2's runtime semantics (scoping, loop
// variables, macros, Undefined) under hard limits on output, work, loops and recursion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/tokenizer/jinja/ast.h"
#include "models/tokenizer/jinja/value.h"

namespace linfer::tokenizer::jinja {

// Statements and expressions evaluated at once (each a few native stack frames; keeps a
// render well inside a 1 MiB thread stack).
inline constexpr int kMaxNesting = 1000;

// Work units charged per list or dict item built (the bytes of a Value).
inline constexpr int64_t kItemCost = 32;

struct Limits {
  int64_t max_output_bytes = 16 << 20;    // also bounds every string a template builds
  int max_recursion = 64;                 // macro call depth
  int64_t max_loop_iterations = 1 << 22;  // for-loop iterations; also bounds list sizes
  int64_t max_work = int64_t{1} << 28;    // bytes produced or scanned (an item: kItemCost)
  absl::Time now;                         // for strftime_now
};

// Variables of one scope; a for-loop iteration, macro call or with-block opens a child.
struct Scope {
  absl::flat_hash_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* Find(const std::string& name) const;
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::string* out) : limits_(limits), out_(out) {}

  // Renders `body` with the top-level variables of `vars` (a dict) into the output string.
  absl::Status Run(const Body& body, const Value& vars);

  // Budget: every produced or scanned byte/item costs a unit of `max_work`.
  absl::Status Charge(int64_t units);
  absl::StatusOr<Value> MakeString(std::string s, bool markup = false);
  absl::StatusOr<Value> MakeList(std::vector<Value> items, bool tuple = false);
  absl::StatusOr<Value> MakeDict(std::shared_ptr<DictData> dict);
  const Limits& limits() const { return limits_; }

  // Python semantics shared with the builtins.
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  absl::StatusOr<Value> CallValue(const Value& fn, CallArgs args);
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, CallArgs args);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, CallArgs args);

 private:
  absl::StatusOr<Flow> ExecBody(const Body& body);
  absl::StatusOr<Flow> Exec(const Stmt& s);
  absl::StatusOr<Flow> ExecInner(const Stmt& s);
  // Bounds the native stack: statements and expressions being evaluated at once, across calls.
  absl::Status EnterNesting();
  absl::StatusOr<Flow> ExecFor(const Stmt& s);
  absl::Status ExecSet(const Stmt& s);
  absl::Status Assign(const Expr& target, const Value& value);
  absl::StatusOr<bool> Reaches(const Value& v, const NamespaceData* target);
  absl::Status ExecBlock(const Stmt& s);
  absl::StatusOr<Value> DefineMacro(const Stmt& s);
  absl::StatusOr<Value> CallMacro(const Stmt& def, Scope* closure, CallArgs& args);
  absl::StatusOr<Value> EvalFilterChain(const Expr& e, const Value& input);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::Status Emit(absl::string_view text);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<Value> EvalName(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> EvalSlice(const Value& obj, const Expr& slice);

  const Limits& limits_;
  std::string* out_;
  std::shared_ptr<Scope> scope_;
  std::vector<std::shared_ptr<Scope>> captured_;      // scopes macros close over, kept for the run
  absl::flat_hash_map<const Stmt*, bool> uses_loop_;  // for-loops whose body reads `loop`
  int64_t iterations_ = 0;
  int64_t work_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;
};

// Binds positional and keyword arguments to `names` (Python's signature binding); `out` gets one
// value per name, Undefined where not given. InvalidArgument on unknown or excess arguments.
absl::Status BindArgs(const CallArgs& args, std::initializer_list<const char*> names,
                      absl::string_view function, std::vector<Value>* out);

// Whether `name` is read anywhere in `body` (jinja2 binds loop, varargs, kwargs only then).
bool BodyUsesName(const Body& body, const std::string& name);

// "line:column: " prefix for errors raised at `pos`, unless the status already has one.
absl::Status AtPos(absl::Status status, SourcePos pos);

}  // namespace linfer::tokenizer::jinja
