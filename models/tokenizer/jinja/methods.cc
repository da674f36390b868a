// Attribute and item lookup with jinja2's sandboxed getattr/getitem fallbacks, iteration, and
// the Python methods templates call on str, dict and list values.
#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/builtins.h"
#include "models/tokenizer/jinja/operators.h"
#include "models/tokenizer/jinja/py_format.h"
#include "models/tokenizer/jinja/py_string.h"

namespace linfer::tokenizer::jinja {
namespace {

absl::Status TypeError(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", msg));
}

// jinja2's object_type_repr for "has no attribute" hints.
std::string TypeRepr(const Value& v) {
  return v.is_none() ? "None" : absl::StrCat(v.TypeName(), " object");
}

// An optional string argument (None/absent -> nullopt).
absl::StatusOr<std::optional<std::string>> OptString(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) return TypeError(absl::StrCat(what, " arg must be None or str"));
  return v.str();
}

int64_t OptInt(const Value& v, int64_t dflt) {
  return v.is_int() || v.is_bool() ? v.int_value() : dflt;
}

absl::StatusOr<Value> StringList(Interpreter& in, const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return in.MakeList(std::move(items));
}

// startswith/endswith accept a str or a tuple of str.
absl::StatusOr<Value> AffixTest(const Value& self, const Value& arg, bool prefix) {
  std::vector<Value> options = arg.is_list() ? arg.list() : std::vector<Value>{arg};
  const std::string& s = self.str();
  for (const Value& o : options) {
    if (!o.is_string()) {
      return TypeError(absl::StrCat(prefix ? "startswith" : "endswith",
                                    " first arg must be str or a tuple of str, not ",
                                    o.TypeName()));
    }
    const std::string& a = o.str();
    if (a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0
                                        : s.compare(s.size() - a.size(), a.size(), a) == 0)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

// str.format with plain fields: {}, {0}, {name} and {{ }} escapes (no format specs).
absl::StatusOr<Value> StrFormat(Interpreter& in, const Value& self, const CallArgs& args) {
  const std::string& f = self.str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return absl::InvalidArgumentError("ValueError: Single '}' encountered");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("ValueError: Single '{' encountered");
    }
    const std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      const size_t k = field.empty() ? next++ : std::stoul(field);
      if (k < args.positional.size()) v = &args.positional[k];
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) v = &value;
      }
    }
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("str.format: no argument for field '{", field,
                                                     "}' (format specs and "
                                                     "attribute lookups are not supported)"));
    }
    out += Str(*v);
  }
  return in.MakeString(std::move(out));
}

absl::StatusOr<Value> StrMethod(Interpreter& in, const Value& self, const std::string& m,
                                CallArgs& args) {
  RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(self.str().size())));
  std::vector<Value> a;
  const std::string& s = self.str();
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    RETURN_IF_ERROR(BindArgs(args, {"chars"}, m, &a));
    ASSIGN_OR_RETURN(auto chars, OptString(a[0], m.c_str()));
    return in.MakeString(PyStrip(s, chars, m != "rstrip", m != "lstrip"), self.is_markup());
  }
  if (m == "split" || m == "rsplit") {
    RETURN_IF_ERROR(BindArgs(args, {"sep", "maxsplit"}, m, &a));
    ASSIGN_OR_RETURN(auto sep, OptString(a[0], "sep"));
    if (sep.has_value() && sep->empty()) {
      return absl::InvalidArgumentError("ValueError: empty separator");
    }
    return StringList(in, PySplit(s, sep, OptInt(a[1], -1), m == "rsplit"));
  }
  if (m == "splitlines") {
    return StringList(in, PySplitLines(s));
  }
  if (m == "startswith" || m == "endswith") {
    RETURN_IF_ERROR(BindArgs(args, {"prefix"}, m, &a));
    return AffixTest(self, a[0], m == "startswith");
  }
  if (m == "replace") {
    RETURN_IF_ERROR(BindArgs(args, {"old", "new", "count"}, m, &a));
    if (!a[0].is_string() || !a[1].is_string()) return TypeError("replace() argument must be str");
    return in.MakeString(PyReplace(s, a[0].str(), a[1].str(), OptInt(a[2], -1)), self.is_markup());
  }
  if (m == "upper") return in.MakeString(PyUpper(s), self.is_markup());
  if (m == "lower") return in.MakeString(PyLower(s), self.is_markup());
  if (m == "title") return in.MakeString(PyTitle(s), self.is_markup());
  if (m == "capitalize") return in.MakeString(PyCapitalize(s), self.is_markup());
  if (m == "find" || m == "rfind" || m == "count" || m == "index" || m == "rindex") {
    RETURN_IF_ERROR(BindArgs(args, {"sub"}, m, &a));
    if (!a[0].is_string()) return TypeError("must be str");
    if (m == "count") return Value::Int(PyCount(s, a[0].str()));
    const int64_t i = PyFind(s, a[0].str(), m == "rfind" || m == "rindex");
    if (i < 0 && (m == "index" || m == "rindex")) {
      return absl::InvalidArgumentError("ValueError: substring not found");
    }
    return Value::Int(i);
  }
  if (m == "join") {
    RETURN_IF_ERROR(BindArgs(args, {"iterable"}, m, &a));
    ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      items[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += items[i].str();
      if (static_cast<int64_t>(out.size()) > in.limits().max_output_bytes) break;
    }
    return in.MakeString(std::move(out));
  }
  if (m == "isdigit") return Value::Bool(PyIsDigit(s));
  if (m == "isalpha") return Value::Bool(PyIsAlpha(s));
  if (m == "isalnum") return Value::Bool(PyIsAlnum(s));
  if (m == "isspace") return Value::Bool(PyIsSpaceStr(s));
  if (m == "islower") return Value::Bool(PyIsLower(s));
  if (m == "isupper") return Value::Bool(PyIsUpper(s));
  if (m == "removeprefix" || m == "removesuffix") {
    RETURN_IF_ERROR(BindArgs(args, {"affix"}, m, &a));
    if (!a[0].is_string()) return TypeError(absl::StrCat(m, "() argument must be str"));
    ASSIGN_OR_RETURN(Value has, AffixTest(self, a[0], m == "removeprefix"));
    if (!has.bool_value()) return self;
    return in.MakeString(m == "removeprefix" ? s.substr(a[0].str().size())
                                             : s.substr(0, s.size() - a[0].str().size()));
  }
  if (m == "format") return StrFormat(in, self, args);
  return absl::InvalidArgumentError(absl::StrCat("str.", m, "() is not supported"));
}

absl::StatusOr<Value> DictMethod(Interpreter& in, const Value& self, const std::string& m,
                                 CallArgs& args) {
  std::vector<Value> a;
  const DictData& d = self.dict();
  if (m == "get") {
    RETURN_IF_ERROR(BindArgs(args, {"key", "default"}, m, &a));
    const Value* v = d.Find(a[0]);
    if (v != nullptr) return *v;
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  if (m == "copy") return self;
  RETURN_IF_ERROR(BindArgs(args, {}, m, &a));
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (m == "keys") out.push_back(k);
    if (m == "values") out.push_back(v);
    if (m == "items") out.push_back(Value::List({k, v}, /*tuple=*/true));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> ListMethod(Interpreter& in, const Value& self, const std::string& m,
                                 CallArgs& args) {
  std::vector<Value> a;
  if (m == "copy") return self;
  RETURN_IF_ERROR(BindArgs(args, {"value"}, m, &a));
  RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(self.list().size())));
  int64_t count = 0;
  for (size_t i = 0; i < self.list().size(); ++i) {
    if (!Equals(self.list()[i], a[0])) continue;
    if (m == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (m == "index") return absl::InvalidArgumentError("ValueError: value is not in list");
  return Value::Int(count);
}

bool IsOneOf(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::optional<Value> BoundMethod(const Value& obj, const std::string& name) {
  using Fn = absl::StatusOr<Value> (*)(Interpreter&, const Value&, const std::string&, CallArgs&);
  Fn fn = nullptr;
  if (obj.is_string() &&
      IsOneOf(name,
              {"strip",      "lstrip",       "rstrip",       "split",   "rsplit",  "splitlines",
               "startswith", "endswith",     "replace",      "upper",   "lower",   "title",
               "capitalize", "find",         "rfind",        "index",   "rindex",  "count",
               "join",       "isdigit",      "isalpha",      "isalnum", "isspace", "islower",
               "isupper",    "removeprefix", "removesuffix", "format"})) {
    fn = StrMethod;
  } else if (obj.is_dict()) {
    if (IsOneOf(name, {"clear", "pop", "popitem", "setdefault", "update"})) {
      return Value::Undefined(
          absl::StrCat("access to attribute '", name, "' of 'dict' object is unsafe."), true);
    }
    if (IsOneOf(name, {"get", "items", "keys", "values", "copy"})) fn = DictMethod;
  } else if (obj.is_list()) {
    if (!obj.is_tuple() && IsOneOf(name, {"append", "clear", "extend", "insert", "pop", "remove",
                                          "reverse", "sort"})) {
      return Value::Undefined(
          absl::StrCat("access to attribute '", name, "' of 'list' object is unsafe."), true);
    }
    if (IsOneOf(name, {"count", "index", "copy"})) fn = ListMethod;
  }
  if (fn == nullptr) return std::nullopt;
  return Value::Callable(
      name, [fn, obj, name](Interpreter& in, CallArgs& args) { return fn(in, obj, name, args); });
}

absl::StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", obj.str()));
  }
  if (std::optional<Value> m = BoundMethod(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(absl::string_view(name))) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns().Find(name)) return *v;
  }
  return Value::Undefined(absl::StrCat("'", TypeRepr(obj), "' has no attribute '", name, "'"));
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", obj.str()));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    return IndexSequence(*this, obj, key.int_value());
  }
  if (key.is_string()) {
    if (std::optional<Value> m = BoundMethod(obj, key.str())) return *m;
    if (obj.is_namespace()) {
      if (const Value* v = obj.ns().Find(key.str())) return *v;
    }
    return Value::Undefined(
        absl::StrCat("'", TypeRepr(obj), "' has no attribute '", key.str(), "'"));
  }
  return Value::Undefined(absl::StrCat(TypeRepr(obj), " has no element ", Repr(key)));
}

absl::StatusOr<std::vector<Value>> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(v.list().size())));
      return v.list();
    case Value::Kind::kDict: {
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(v.dict().items.size())));
      std::vector<Value> keys;
      for (const auto& [k, unused] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(v.str().size()) * 8));
      std::vector<Value> chars;
      for (char32_t c : CodePoints(v.str())) {
        chars.push_back(Value::String(FromCodePoints({c}, 0, 1), v.is_markup()));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

}  // namespace linfer::tokenizer::jinja
