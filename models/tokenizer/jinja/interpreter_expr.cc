// Expression evaluation (see interpreter.h): names, literals, operators, calls, filters, tests.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/builtins.h"
#include "models/tokenizer/jinja/interpreter.h"
#include "models/tokenizer/jinja/operators.h"
#include "models/tokenizer/jinja/py_format.h"

namespace linfer::tokenizer::jinja {

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  RETURN_IF_ERROR(AtPos(EnterNesting(), e.pos));
  absl::StatusOr<Value> v = EvalInner(e);
  --nesting_;
  if (!v.ok()) return AtPos(v.status(), e.pos);
  return v;
}

absl::StatusOr<Value> Interpreter::EvalName(const Expr& e) {
  if (const Value* v = scope_->Find(e.name)) return *v;
  Value global = GlobalFunction(e.name);
  if (!global.is_undefined()) return global;
  return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*x));
    args.keyword.emplace_back(k, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  ASSIGN_OR_RETURN(Value fn, Eval(*e.args[0]));
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  return CallValue(fn, std::move(args));
}

absl::StatusOr<Value> Interpreter::EvalFilterChain(const Expr& e, const Value& input) {
  if (e.kind != Expr::Kind::kFilter) return Eval(e);
  // Each filter of a chain is one level, as Eval's nodes are (`x|e|e|...` recurses here).
  RETURN_IF_ERROR(AtPos(EnterNesting(), e.pos));
  absl::StatusOr<Value> v = [&]() -> absl::StatusOr<Value> {
    Value operand = input;
    if (e.args[0] != nullptr) {
      ASSIGN_OR_RETURN(operand, EvalFilterChain(*e.args[0], input));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    return ApplyFilter(e.name, operand, std::move(args));
  }();
  --nesting_;
  if (!v.ok()) return AtPos(v.status(), e.pos);
  return v;
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e) {
  ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==" || op == "!=") {
      result = Equals(left, right) == (op == "==");
    } else if (op == "in" || op == "notin") {
      ASSIGN_OR_RETURN(bool in, Contains(*this, right, left));
      result = in == (op == "in");
    } else if (op == "<" || op == ">=") {
      ASSIGN_OR_RETURN(bool less, Less(left, right));
      result = less == (op == "<");
    } else {  // > and <=: b < a
      ASSIGN_OR_RETURN(bool greater, Less(right, left));
      result = greater == (op == ">");
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Value& obj, const Expr& slice) {
  Value bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (slice.args[i] != nullptr) {
      ASSIGN_OR_RETURN(bounds[i], Eval(*slice.args[i]));
    }
  }
  if (obj.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", obj.str()));
  }
  if (!obj.is_string() && !obj.is_list()) {
    return Value::Undefined(absl::StrCat(obj.TypeName(), " object has no element slice"));
  }
  return SliceSequence(*this, obj, bounds[0], bounds[1], bounds[2]);
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.literal;
    case Expr::Kind::kName:
      return EvalName(e);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ASSIGN_OR_RETURN(CallArgs items, EvalArgs(e, 0));
      return MakeList(std::move(items.positional), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      auto dict = std::make_shared<DictData>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
        if (k.is_list() || k.is_dict()) {
          return absl::InvalidArgumentError(
              absl::StrCat("TypeError: unhashable type: '", k.TypeName(), "'"));
        }
        dict->Set(std::move(k), std::move(v));
      }
      return MakeDict(std::move(dict));
    }
    case Expr::Kind::kGetattr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kGetitem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (e.args[1]->kind == Expr::Kind::kSlice) return EvalSlice(obj, *e.args[1]);
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice:
      return absl::InvalidArgumentError("slice outside a subscript");
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
      return EvalFilterChain(e, Value());
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, operand, std::move(args)));
      return Value::Bool(result);
    }
    case Expr::Kind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!v.Truthy());
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return UnaryOp(v, e.kind == Expr::Kind::kNeg);
    }
    case Expr::Kind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      return BinaryOp(*this, e.name, a, b);
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kConcat: {
      std::string out;
      for (const ExprPtr& part : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*part));
        out += Str(v);
        if (static_cast<int64_t>(out.size()) > limits_.max_output_bytes) break;
      }
      return MakeString(std::move(out));
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e);
    case Expr::Kind::kCondExpr: {
      ASSIGN_OR_RETURN(Value test, Eval(*e.args[0]));
      if (test.Truthy()) return Eval(*e.args[1]);
      if (e.args[2] == nullptr) {
        return Value::Undefined(absl::StrCat("the inline if-expression on line ", e.pos.line,
                                             " evaluated to false and no else section was "
                                             "defined."));
      }
      return Eval(*e.args[2]);
    }
  }
  return absl::InternalError("unknown expression kind");
}

}  // namespace linfer::tokenizer::jinja
