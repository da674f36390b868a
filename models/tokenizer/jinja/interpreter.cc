// Statement execution (see interpreter.h): output, if, for (with jinja2's loop object), set,
// macros and call blocks, filter and with blocks, break/continue.
#include "models/tokenizer/jinja/interpreter.h"

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/py_format.h"

namespace linfer::tokenizer::jinja {
namespace {

// Makes jinja2's `loop` variable for iteration `i` of `items`.
Value LoopValue(const std::vector<Value>& items, size_t i) {
  auto ns = std::make_shared<NamespaceData>();
  ns->read_only = true;
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  ns->attrs = {
      {"index", Value::Int(k + 1)},
      {"index0", Value::Int(k)},
      {"revindex", Value::Int(n - k)},
      {"revindex0", Value::Int(n - k - 1)},
      {"first", Value::Bool(k == 0)},
      {"last", Value::Bool(k == n - 1)},
      {"length", Value::Int(n)},
      {"depth", Value::Int(1)},
      {"depth0", Value::Int(0)},
      {"previtem", k > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
      {"nextitem", k + 1 < n ? items[i + 1] : Value::Undefined("there is no next item")},
  };
  ns->attrs.emplace_back(
      "cycle", Value::Callable("cycle", [k](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
        if (args.positional.empty()) {
          return absl::InvalidArgumentError("no items for cycling given");
        }
        return args.positional[k % args.positional.size()];
      }));
  return Value::Namespace(std::move(ns));
}

}  // namespace

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

absl::Status AtPos(absl::Status status, SourcePos pos) {
  if (status.ok()) return status;
  const std::string& m = std::string(status.message());
  const size_t colon = m.find(':');
  if (colon != std::string::npos && colon > 0 && m.find_first_not_of("0123456789") == colon) {
    return status;  // already "line:column: ..."
  }
  return absl::Status(status.code(), FormatError(pos, m));
}

absl::Status Interpreter::Run(const Body& body, const Value& vars) {
  scope_ = std::make_shared<Scope>();
  for (const auto& [k, v] : vars.dict().items) {
    if (k.is_string()) scope_->vars[k.str()] = v;
  }
  absl::StatusOr<Flow> flow = ExecBody(body);
  scope_.reset();
  captured_.clear();
  return flow.status();
}

absl::Status Interpreter::Charge(int64_t units) {
  work_ += units;
  if (work_ > limits_.max_work) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template exceeded its work budget (", limits_.max_work, " units)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::MakeString(std::string s, bool markup) {
  if (static_cast<int64_t>(s.size()) > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template built a string longer than ", limits_.max_output_bytes, " bytes"));
  }
  RETURN_IF_ERROR(Charge(static_cast<int64_t>(s.size()) + 1));
  return Value::String(std::move(s), markup);
}

absl::StatusOr<Value> Interpreter::MakeList(std::vector<Value> items, bool tuple) {
  if (static_cast<int64_t>(items.size()) > limits_.max_loop_iterations) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template built a list longer than ", limits_.max_loop_iterations, " items"));
  }
  RETURN_IF_ERROR(Charge(kItemCost * static_cast<int64_t>(items.size()) + 1));
  Value v = Value::List(std::move(items), tuple);
  if (v.depth() > kMaxDepth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template nested lists deeper than ", kMaxDepth, " levels"));
  }
  return v;
}

absl::StatusOr<Value> Interpreter::MakeDict(std::shared_ptr<DictData> dict) {
  RETURN_IF_ERROR(Charge(2 * kItemCost * static_cast<int64_t>(dict->items.size()) + 1));
  if (dict->depth > kMaxDepth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template nested dicts deeper than ", kMaxDepth, " levels"));
  }
  return Value::Dict(std::move(dict));
}

absl::Status Interpreter::Emit(absl::string_view text) {
  out_->append(text.data(), text.size());
  if (static_cast<int64_t>(out_->size()) > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template output exceeded ", limits_.max_output_bytes, " bytes"));
  }
  return Charge(static_cast<int64_t>(text.size()));
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  absl::StatusOr<Flow> flow = ExecBody(body);
  out_ = saved;
  RETURN_IF_ERROR(flow.status());
  return buffer;
}

absl::StatusOr<Flow> Interpreter::ExecBody(const Body& body) {
  for (const StmtPtr& s : body) {
    ASSIGN_OR_RETURN(Flow flow, Exec(*s));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::Status Interpreter::EnterNesting() {
  if (++nesting_ > kMaxNesting) {
    --nesting_;
    return absl::ResourceExhaustedError(absl::StrCat("template evaluation nested deeper than ",
                                                     kMaxNesting, " levels (macros x blocks)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flow> Interpreter::Exec(const Stmt& s) {
  RETURN_IF_ERROR(AtPos(EnterNesting(), s.pos));
  absl::StatusOr<Flow> flow = ExecInner(s);
  --nesting_;
  return flow;
}

absl::StatusOr<Flow> Interpreter::ExecInner(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::kData:
      RETURN_IF_ERROR(AtPos(Emit(s.text), s.pos));
      return Flow::kNormal;
    case Stmt::Kind::kPrint: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      RETURN_IF_ERROR(AtPos(Emit(Str(v)), s.pos));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.tests.size(); ++i) {
        ASSIGN_OR_RETURN(Value t, Eval(*s.tests[i]));
        if (t.Truthy()) return ExecBody(s.bodies[i]);
      }
      return ExecBody(s.else_body);
    case Stmt::Kind::kFor:
      return ExecFor(s);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      RETURN_IF_ERROR(ExecSet(s));
      return Flow::kNormal;
    case Stmt::Kind::kMacro: {
      ASSIGN_OR_RETURN(Value macro, DefineMacro(s));
      scope_->vars[s.text] = std::move(macro);
      return Flow::kNormal;
    }
    case Stmt::Kind::kCallBlock:
    case Stmt::Kind::kFilterBlock:
    case Stmt::Kind::kWith:
      RETURN_IF_ERROR(ExecBlock(s));
      return Flow::kNormal;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kGeneration:
      return ExecBody(s.body);
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Interpreter::ExecFor(const Stmt& s) {
  ASSIGN_OR_RETURN(const Value iterable, Eval(*s.expr));
  std::vector<Value> storage;
  const std::vector<Value>* items = &storage;
  const std::shared_ptr<Scope> outer = scope_;
  if (iterable.is_list() && s.test == nullptr) {
    RETURN_IF_ERROR(Charge(static_cast<int64_t>(iterable.list().size())));
    items = &iterable.list();  // iterated in place; `iterable` keeps it alive
  } else {
    absl::StatusOr<std::vector<Value>> all = Iterate(iterable);
    RETURN_IF_ERROR(AtPos(all.status(), s.expr->pos));
    for (Value& item : *all) {
      if (s.test != nullptr) {  // `for x in xs if cond`: filtered before loop.* is computed
        scope_ = std::make_shared<Scope>(Scope{{}, outer});
        absl::Status st = Assign(*s.target, item);
        absl::StatusOr<Value> keep = st.ok() ? Eval(*s.test) : absl::StatusOr<Value>(st);
        scope_ = outer;
        RETURN_IF_ERROR(keep.status());
        if (!keep->Truthy()) continue;
      }
      storage.push_back(std::move(item));
    }
  }
  auto cached = uses_loop_.find(&s);
  if (cached == uses_loop_.end()) {
    cached = uses_loop_.emplace(&s, BodyUsesName(s.body, "loop")).first;
  }
  const bool uses_loop = cached->second;
  std::shared_ptr<Scope> iteration;
  for (size_t i = 0; i < items->size(); ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      return AtPos(absl::ResourceExhaustedError(absl::StrCat(
                       "template exceeded ", limits_.max_loop_iterations, " loop iterations")),
                   s.pos);
    }
    // Each iteration starts from a fresh scope (jinja2 semantics); reuse the object unless a
    // macro defined in the body still refers to it.
    if (iteration == nullptr || iteration.use_count() > 1) {
      iteration = std::make_shared<Scope>(Scope{{}, outer});
    } else {
      iteration->vars.clear();
    }
    scope_ = iteration;
    if (uses_loop) scope_->vars["loop"] = LoopValue(*items, i);
    absl::Status st = AtPos(Assign(*s.target, (*items)[i]), s.target->pos);
    absl::StatusOr<Flow> flow = st.ok() ? ExecBody(s.body) : absl::StatusOr<Flow>(st);
    scope_ = outer;
    RETURN_IF_ERROR(flow.status());
    if (*flow == Flow::kBreak) break;
  }
  if (items->empty()) return ExecBody(s.else_body);
  return Flow::kNormal;
}

// Whether `target` can be reached from `v` through lists, dicts and namespaces (each container
// visited once, iteratively: values may share containers, and may be deeply nested).
absl::StatusOr<bool> Interpreter::Reaches(const Value& v, const NamespaceData* target) {
  absl::flat_hash_set<const void*> seen;
  std::vector<const Value*> todo = {&v};
  while (!todo.empty()) {
    const Value* x = todo.back();
    todo.pop_back();
    RETURN_IF_ERROR(Charge(1));
    if (x->is_namespace()) {
      if (&x->ns() == target) return true;
      if (!seen.insert(&x->ns()).second) continue;
      for (const auto& [name, item] : x->ns().attrs) todo.push_back(&item);
    } else if (x->is_list()) {
      if (!seen.insert(&x->list()).second) continue;
      for (const Value& item : x->list()) todo.push_back(&item);
    } else if (x->is_dict()) {
      if (!seen.insert(&x->dict()).second) continue;
      for (const auto& [k, item] : x->dict().items) todo.push_back(&item);
    }
  }
  return false;
}

absl::Status Interpreter::Assign(const Expr& target, const Value& value) {
  if (target.kind == Expr::Kind::kName) {
    scope_->vars[target.name] = value;
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kGetattr) {  // {% set ns.attr = value %}
    const Value* ns = scope_->Find(target.args[0]->name);
    if (ns == nullptr || !ns->is_namespace() || ns->ns().read_only) {
      return AtPos(absl::InvalidArgumentError("cannot assign attribute on non-namespace object"),
                   target.pos);
    }
    // A namespace that held itself would never be freed and would print forever: refused.
    ASSIGN_OR_RETURN(const bool cycle, Reaches(value, &ns->ns()));
    if (cycle) {
      return AtPos(absl::InvalidArgumentError(
                       absl::StrCat("cannot store namespace '", target.args[0]->name,
                                    "' inside itself (attribute '", target.name, "')")),
                   target.pos);
    }
    ns->ns().Set(target.name, value);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.size() != target.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat(items.size() > target.args.size()
                                                       ? "too many values to unpack (expected "
                                                       : "not enough values to unpack (expected ",
                                                   target.args.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) RETURN_IF_ERROR(Assign(*target.args[i], items[i]));
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& s) {
  Value value;
  if (s.kind == Stmt::Kind::kSet) {
    ASSIGN_OR_RETURN(value, Eval(*s.expr));
  } else {
    ASSIGN_OR_RETURN(std::string text, Capture(s.body));
    ASSIGN_OR_RETURN(value, MakeString(std::move(text)));
    if (s.expr != nullptr) {
      ASSIGN_OR_RETURN(value, EvalFilterChain(*s.expr, value));
    }
  }
  return AtPos(Assign(*s.target, value), s.pos);
}

}  // namespace linfer::tokenizer::jinja
