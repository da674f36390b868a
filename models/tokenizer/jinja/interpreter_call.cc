// Macros, call/filter/with blocks and calls of callable values, with jinja2.runtime.Macro's
// argument binding (missing parameters are Undefined; varargs/kwargs/caller only when used).
#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/interpreter.h"
#include "models/tokenizer/jinja/py_format.h"

namespace linfer::tokenizer::jinja {
namespace {

bool NameUsed(const Body& body, const std::string& name);

// Without recursing: a chain of a million `or`s is a tree as deep as it is long (blocks, which
// the parser bounds, are walked recursively below).
bool NameUsed(const Expr* root, const std::string& name) {
  std::vector<const Expr*> pending = {root};
  while (!pending.empty()) {
    const Expr* e = pending.back();
    pending.pop_back();
    if (e == nullptr) continue;
    if (e->kind == Expr::Kind::kName && e->name == name) return true;
    for (const ExprPtr& a : e->args) pending.push_back(a.get());
    for (const auto& kv : e->kwargs) pending.push_back(kv.second.get());
  }
  return false;
}

bool NameUsed(const Body& body, const std::string& name) {
  for (const StmtPtr& s : body) {
    if (NameUsed(s->expr.get(), name) || NameUsed(s->test.get(), name) || NameUsed(s->body, name) ||
        NameUsed(s->else_body, name)) {
      return true;
    }
    for (const ExprPtr& t : s->tests) {
      if (NameUsed(t.get(), name)) return true;
    }
    for (const Body& b : s->bodies) {
      if (NameUsed(b, name)) return true;
    }
    for (const ExprPtr& v : s->values) {
      if (NameUsed(v.get(), name)) return true;
    }
    for (const ExprPtr& d : s->signature.defaults) {
      if (NameUsed(d.get(), name)) return true;
    }
  }
  return false;
}

}  // namespace

bool BodyUsesName(const Body& body, const std::string& name) { return NameUsed(body, name); }

absl::Status BindArgs(const CallArgs& args, std::initializer_list<const char*> names,
                      absl::string_view function, std::vector<Value>* out) {
  out->assign(names.size(), Value());
  if (args.positional.size() > names.size()) {
    return absl::InvalidArgumentError(absl::StrCat("TypeError: ", function, "() takes at most ",
                                                   names.size(), " arguments (",
                                                   args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) (*out)[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TypeError: ", function, "() got an unexpected keyword argument '", key, "'"));
    }
    if (i < args.positional.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: ", function, "() got multiple values for argument '", key, "'"));
    }
    (*out)[i] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::DefineMacro(const Stmt& s) {
  captured_.push_back(scope_);
  Scope* closure = scope_.get();
  const Stmt* def = &s;
  return Value::Callable(s.text, [def, closure](Interpreter& in, CallArgs& args) {
    return in.CallMacro(*def, closure, args);
  });
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& def, Scope* closure, CallArgs& args) {
  const std::string name = def.kind == Stmt::Kind::kMacro ? def.text : "caller";
  if (call_depth_ >= limits_.max_recursion) {
    return absl::ResourceExhaustedError(
        absl::StrCat("macro calls nested deeper than ", limits_.max_recursion));
  }
  const std::vector<std::string>& params = def.signature.params;
  const bool uses_varargs = NameUsed(def.body, "varargs");
  const bool uses_kwargs = NameUsed(def.body, "kwargs");
  if (args.positional.size() > params.size() && !uses_varargs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TypeError: macro '", name, "' takes not more than ", params.size(), " argument(s)"));
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = std::shared_ptr<Scope>(std::shared_ptr<Scope>(), closure);  // non-owning
  const std::shared_ptr<Scope> saved = scope_;
  scope_ = scope;
  ++call_depth_;
  auto finish = [&](absl::StatusOr<Value> v) {
    scope_ = saved;
    --call_depth_;
    return v;
  };
  const size_t first_default = params.size() - def.signature.defaults.size();
  for (size_t i = 0; i < params.size(); ++i) {
    if (i < args.positional.size()) {
      scope->vars[params[i]] = args.positional[i];
      continue;
    }
    auto it = std::find_if(args.keyword.begin(), args.keyword.end(),
                           [&](const auto& kv) { return kv.first == params[i]; });
    if (it != args.keyword.end()) {
      scope->vars[params[i]] = it->second;
      args.keyword.erase(it);
    } else if (i >= first_default) {
      absl::StatusOr<Value> d = Eval(*def.signature.defaults[i - first_default]);
      if (!d.ok()) return finish(d.status());
      scope->vars[params[i]] = *d;
    } else {
      scope->vars[params[i]] =
          Value::Undefined(absl::StrCat("parameter '", params[i], "' was not provided"));
    }
  }
  auto caller = std::find_if(args.keyword.begin(), args.keyword.end(),
                             [](const auto& kv) { return kv.first == "caller"; });
  if (caller != args.keyword.end()) {
    scope->vars["caller"] = caller->second;
    args.keyword.erase(caller);
  }
  std::vector<Value> extra;
  for (size_t i = params.size(); i < args.positional.size(); ++i) {
    extra.push_back(args.positional[i]);
  }
  if (uses_varargs) scope->vars["varargs"] = Value::List(std::move(extra), /*tuple=*/true);
  if (!args.keyword.empty() && !uses_kwargs) {
    return finish(absl::InvalidArgumentError(absl::StrCat(
        "TypeError: macro '", name, "' takes no keyword argument '", args.keyword[0].first, "'")));
  }
  if (uses_kwargs) {
    auto kw = std::make_shared<DictData>();
    for (auto& [k, v] : args.keyword) kw->Set(Value::String(k), v);
    scope->vars["kwargs"] = Value::Dict(std::move(kw));
  }
  absl::StatusOr<std::string> text = Capture(def.body);
  if (!text.ok()) return finish(text.status());
  return finish(MakeString(std::move(*text)));
}

absl::Status Interpreter::ExecBlock(const Stmt& s) {
  if (s.kind == Stmt::Kind::kFilterBlock) {
    ASSIGN_OR_RETURN(std::string text, Capture(s.body));
    ASSIGN_OR_RETURN(Value v, MakeString(std::move(text)));
    ASSIGN_OR_RETURN(v, EvalFilterChain(*s.expr, v));
    return AtPos(Emit(Str(v)), s.pos);
  }
  if (s.kind == Stmt::Kind::kWith) {
    std::vector<Value> values;
    for (const ExprPtr& e : s.values) {
      ASSIGN_OR_RETURN(Value v, Eval(*e));
      values.push_back(std::move(v));
    }
    const std::shared_ptr<Scope> outer = scope_;
    scope_ = std::make_shared<Scope>(Scope{{}, outer});
    absl::Status st;
    for (size_t i = 0; i < values.size() && st.ok(); ++i) st = Assign(*s.targets[i], values[i]);
    absl::StatusOr<Flow> flow = st.ok() ? ExecBody(s.body) : absl::StatusOr<Flow>(st);
    scope_ = outer;
    return flow.status();
  }
  // {% call(params) macro(args) %}body{% endcall %}: body becomes the `caller` macro.
  captured_.push_back(scope_);
  Scope* closure = scope_.get();
  const Stmt* def = &s;
  Value caller = Value::Callable("caller", [def, closure](Interpreter& in, CallArgs& args) {
    return in.CallMacro(*def, closure, args);
  });
  const Expr& call = *s.expr;
  ASSIGN_OR_RETURN(Value fn, Eval(*call.args[0]));
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1));
  args.keyword.emplace_back("caller", std::move(caller));
  absl::StatusOr<Value> result = CallValue(fn, std::move(args));
  RETURN_IF_ERROR(AtPos(result.status(), call.pos));
  return AtPos(Emit(Str(*result)), s.pos);
}

absl::StatusOr<Value> Interpreter::CallValue(const Value& fn, CallArgs args) {
  if (fn.is_undefined()) {
    if (fn.is_unsafe_undefined()) {
      return absl::InvalidArgumentError(absl::StrCat("SecurityError: ", fn.str()));
    }
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", fn.str()));
  }
  if (!fn.is_callable()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TypeError: '", fn.TypeName(), "' object is not callable"));
  }
  return fn.callable().fn(*this, args);
}

}  // namespace linfer::tokenizer::jinja
