// Global functions and tests (see builtins.h): range, dict, namespace and transformers'
// raise_exception / strftime_now; jinja2.tests.
#include "models/tokenizer/jinja/builtins.h"

#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/operators.h"
#include "models/tokenizer/jinja/py_format.h"
#include "models/tokenizer/jinja/py_string.h"

namespace linfer::tokenizer::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

absl::Status TypeError(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", msg));
}

absl::StatusOr<Value> Range(Interpreter& in, CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    return TypeError("range expected 1 to 3 integer arguments");
  }
  int64_t v[3] = {0, 0, 1};
  for (const Value& a : args.positional) {
    if (!a.is_int() && !a.is_bool()) {
      return TypeError(
          absl::StrCat("'", a.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  if (args.positional.size() == 1) {
    v[1] = args.positional[0].int_value();
  } else {
    for (size_t i = 0; i < args.positional.size(); ++i) v[i] = args.positional[i].int_value();
  }
  if (v[2] == 0) return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
  const int64_t span = v[2] > 0 ? v[1] - v[0] : v[0] - v[1];
  const int64_t step = v[2] > 0 ? v[2] : -v[2];
  const int64_t n = span <= 0 ? 0 : (span - 1) / step + 1;
  if (n > kMaxRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (",
        kMaxRange, ")."));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) items.push_back(Value::Int(v[0] + i * v[2]));
  return in.MakeList(std::move(items));
}

absl::StatusOr<Value> Dict(Interpreter& in, CallArgs& args) {
  auto dict = std::make_shared<DictData>();
  if (args.positional.size() > 1) return TypeError("dict expected at most 1 argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items) dict->Set(k, v);
    } else {
      ASSIGN_OR_RETURN(std::vector<Value> pairs, in.Iterate(src));
      for (const Value& p : pairs) {
        if (!p.is_list() || p.list().size() != 2) {
          return absl::InvalidArgumentError(
              "ValueError: dictionary update sequence element "
              "has the wrong length");
        }
        dict->Set(p.list()[0], p.list()[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) dict->Set(Value::String(k), v);
  return in.MakeDict(std::move(dict));
}

absl::StatusOr<Value> Namespace(Interpreter&, CallArgs& args) {
  auto ns = std::make_shared<NamespaceData>();
  if (args.positional.size() > 1) return TypeError("namespace expected at most 1 argument");
  if (!args.positional.empty()) {
    if (!args.positional[0].is_dict()) return TypeError("namespace argument must be a mapping");
    for (const auto& [k, v] : args.positional[0].dict().items) {
      if (k.is_string()) ns->Set(k.str(), v);
    }
  }
  for (auto& [k, v] : args.keyword) ns->Set(k, v);
  return Value::Namespace(std::move(ns));
}

absl::StatusOr<Value> RaiseException(Interpreter&, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"message"}, "raise_exception", &a));
  return absl::InvalidArgumentError(a[0].is_string() ? a[0].str() : absl::StrCat(a[0].str()));
}

// datetime.now().strftime(fmt): C strftime on local time, with Python's %f and naive %z/%Z.
absl::StatusOr<Value> StrftimeNow(Interpreter& in, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"format"}, "strftime_now", &a));
  if (!a[0].is_string()) return TypeError("strftime() argument 1 must be str");
  const absl::Time now = in.limits().now;
  const int64_t micros = absl::ToUnixMicros(now);
  const time_t secs =
      static_cast<time_t>(micros >= 0 ? micros / 1000000 : (micros - 999999) / 1000000);
  const int64_t frac = micros - static_cast<int64_t>(secs) * 1000000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  std::string fmt;
  const std::string& f = a[0].str();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '%' && i + 1 < f.size()) {
      const char c = f[i + 1];
      if (c == 'f') {
        fmt += absl::StrFormat("%06d", frac);
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      if (c == ':' && i + 2 < f.size() && f[i + 2] == 'z') {
        i += 2;
        continue;
      }
      fmt += f.substr(i, 2);
      ++i;
      continue;
    }
    fmt.push_back(f[i]);
  }
  if (fmt.empty()) return Value::String("");
  for (size_t cap = 256 + fmt.size() * 4; cap <= 65536 + fmt.size() * 256; cap *= 4) {
    std::string buf(cap, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) return in.MakeString(buf.substr(0, n));
  }
  return Value::String("");
}

absl::StatusOr<int64_t> IntArg(const Value& v) {
  if (v.is_int() || v.is_bool()) return v.int_value();
  return TypeError(absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
}

}  // namespace

Value GlobalFunction(const std::string& name) {
  if (name == "range") return Value::Callable(name, Range);
  if (name == "dict") return Value::Callable(name, Dict);
  if (name == "namespace") return Value::Callable(name, Namespace);
  if (name == "raise_exception") return Value::Callable(name, RaiseException);
  if (name == "strftime_now") return Value::Callable(name, StrftimeNow);
  return Value();
}

absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& v,
                              CallArgs& args) {
  const Value arg = args.positional.empty() ? Value() : args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return v.is_markup();
  if (name == "sameas") return v.SameAs(arg);
  if (name == "lower" || name == "upper") {
    const std::string s = v.is_string() ? v.str() : Str(v);
    return name == "lower" ? PyIsLower(s) : PyIsUpper(s);
  }
  if (name == "in") return Contains(in, arg, v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    ASSIGN_OR_RETURN(int64_t x, IntArg(v));
    if (name != "divisibleby") return (((x % 2) + 2) % 2 == 1) == (name == "odd");
    ASSIGN_OR_RETURN(int64_t d, IntArg(arg));
    if (d == 0) return absl::InvalidArgumentError("ZeroDivisionError: integer modulo by zero");
    return x % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, arg);
  if (name == "ne" || name == "!=") return !Equals(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<") return Less(v, arg);
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(arg, v);
  if (name == "le" || name == "<=") {
    ASSIGN_OR_RETURN(bool gt, Less(arg, v));
    return !gt;
  }
  if (name == "ge" || name == ">=") {
    ASSIGN_OR_RETURN(bool lt, Less(v, arg));
    return !lt;
  }
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    CallArgs none;
    absl::StatusOr<Value> probe =
        name == "filter" ? CallFilter(in, v.str(), Value(), none) : Value::Bool(true);
    return !absl::IsNotFound(probe.status());
  }
  return absl::NotFoundError(absl::StrCat("No test named '", name, "'."));
}

absl::StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& v,
                                               CallArgs args) {
  absl::StatusOr<Value> r = CallFilter(*this, name, v, args);
  if (absl::IsNotFound(r.status())) return absl::InvalidArgumentError(r.status().message());
  return r;
}

absl::StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& v,
                                            CallArgs args) {
  absl::StatusOr<bool> r = CallTest(*this, name, v, args);
  if (absl::IsNotFound(r.status())) return absl::InvalidArgumentError(r.status().message());
  return r;
}

}  // namespace linfer::tokenizer::jinja
