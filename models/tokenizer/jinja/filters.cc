// String and number filters of jinja2.filters, plus transformers' `tojson` override
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/builtins.h"
#include "models/tokenizer/jinja/operators.h"
#include "models/tokenizer/jinja/py_format.h"
#include "models/tokenizer/jinja/py_string.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::jinja {
namespace {

absl::Status TypeError(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", msg));
}

absl::StatusOr<Value> ToJson(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(
      BindArgs(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson", &a));
  JsonDumpOptions o;
  o.ensure_ascii = a[0].Truthy();
  if (!a[1].is_undefined() && !a[1].is_none()) {
    if (a[1].is_string()) {
      o.indent = a[1].str();
    } else if (a[1].is_int() || a[1].is_bool()) {
      const int64_t width = std::clamp<int64_t>(a[1].int_value(), 0, 1024);
      o.indent.emplace();
      o.indent->append(static_cast<size_t>(width), ' ');
    } else {
      return TypeError(
          absl::StrCat("can't multiply sequence by non-int of type '", a[1].TypeName(), "'"));
    }
    o.item_separator = std::string(1, ',');
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    if (!a[2].is_list() || a[2].list().size() != 2 || !a[2].list()[0].is_string() ||
        !a[2].list()[1].is_string()) {
      return TypeError("separators must be a pair of strings");
    }
    o.item_separator = a[2].list()[0].str();
    o.key_separator = a[2].list()[1].str();
  }
  o.sort_keys = a[3].Truthy();
  ASSIGN_OR_RETURN(std::string text, JsonDumps(v, o));
  return in.MakeString(std::move(text));
}

// Python int(str) (base 10): optional sign, digits with single underscores, outer whitespace.
std::optional<int64_t> ParsePyInt(const std::string& s, int base) {
  const std::string t = PyStrip(s, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() &&
        std::isalnum(static_cast<unsigned char>(t[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(t[i + 1]))) {
      continue;
    }
    digits.push_back(t[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (end != digits.c_str() + digits.size() || errno == ERANGE ||
      std::isspace(static_cast<unsigned char>(digits[0]))) {
    return std::nullopt;
  }
  return v;
}

std::optional<double> ParsePyFloat(const std::string& s) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

absl::StatusOr<Value> ToInt(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"default", "base"}, "int", &a));
  const Value dflt = a[0].is_undefined() ? Value::Int(0) : a[0];
  const int base = a[1].is_int() ? static_cast<int>(a[1].int_value()) : 10;
  if (v.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", v.str()));
  }
  if (v.is_int() || v.is_bool()) return Value::Int(v.int_value());
  if (v.is_float()) {
    if (!std::isfinite(v.float_value()))
      return absl::InvalidArgumentError("OverflowError: cannot convert float to integer");
    return Value::Int(static_cast<int64_t>(std::trunc(v.float_value())));
  }
  if (v.is_string()) {
    if (std::optional<int64_t> i = ParsePyInt(v.str(), base)) return Value::Int(*i);
    if (std::optional<double> f = ParsePyFloat(v.str()); f.has_value() && std::isfinite(*f)) {
      return Value::Int(static_cast<int64_t>(std::trunc(*f)));
    }
  }
  return dflt;
}

absl::StatusOr<Value> ToFloat(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"default"}, "float", &a));
  if (v.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", v.str()));
  }
  if (v.is_number()) return Value::Float(v.AsDouble());
  if (v.is_string()) {
    if (std::optional<double> f = ParsePyFloat(v.str())) return Value::Float(*f);
  }
  return a[0].is_undefined() ? Value::Float(0.0) : a[0];
}

absl::StatusOr<Value> Round(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"precision", "method"}, "round", &a));
  const int64_t precision = a[0].is_int() ? a[0].int_value() : 0;
  const std::string method = a[1].is_string() ? a[1].str() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  if (!v.is_number())
    return TypeError(absl::StrCat("type ", v.TypeName(), " doesn't define __round__ method"));
  if (method == "common" && !v.is_float()) return Value::Int(v.int_value());
  const double x = v.AsDouble();
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::Float(r / scale);
  }
  if (!std::isfinite(x)) return Value::Float(x);
  if (precision >= 0) {
    // printf rounds the exact binary value half-to-even, as CPython's round() does.
    const std::string text =
        absl::StrFormat("%.*f", static_cast<int>(std::min<int64_t>(precision, 340)), x);
    return Value::Float(std::strtod(text.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return Value::Float(std::nearbyint(x / scale) * scale);
}

absl::StatusOr<Value> Indent(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"width", "first", "blank"}, "indent", &a));
  std::string indention = "    ";
  if (a[0].is_string()) indention = a[0].str();
  if (a[0].is_int())
    indention = std::string(std::max<int64_t>(0, std::min<int64_t>(a[0].int_value(), 1024)), ' ');
  const std::vector<std::string> lines = PySplitLines(Str(v) + "\n");
  std::string rv;
  if (a[2].Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv.append("\n").append(indention);
      rv.append(lines[i]);
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv.append("\n");
      if (!lines[i].empty()) rv.append(indention).append(lines[i]);
    }
  }
  if (a[1].Truthy()) rv.insert(0, indention);
  return in.MakeString(std::move(rv), v.is_markup());
}

absl::StatusOr<Value> Truncate(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"length", "killwords", "end", "leeway"}, "truncate", &a));
  const int64_t length = a[0].is_int() ? a[0].int_value() : 255;
  const std::string end = a[2].is_string() ? a[2].str() : "...";
  const int64_t leeway = a[3].is_int() ? a[3].int_value() : 5;
  const std::string s = Str(v);
  const std::vector<char32_t> cps = CodePoints(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  if (n <= length + leeway) return in.MakeString(s);
  const int64_t keep = std::max<int64_t>(0, length - PyLen(end));
  std::string head = FromCodePoints(cps, 0, keep);
  if (!a[1].Truthy()) head = PySplit(head, std::string(" "), 1, true)[0];
  return in.MakeString(head + end);
}

absl::StatusOr<Value> Length(const Value& v) {
  if (v.is_undefined()) return Value::Int(0);
  if (v.is_string()) return Value::Int(PyLen(v.str()));
  if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
  if (v.is_dict()) return Value::Int(static_cast<int64_t>(v.dict().items.size()));
  return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

}  // namespace

absl::StatusOr<Value> CallTextFilter(Interpreter& in, const std::string& name, const Value& v,
                                     CallArgs& args) {
  std::vector<Value> a;
  if (name == "tojson") return ToJson(in, v, args);
  if (name == "length" || name == "count") return Length(v);
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(BindArgs(args, {"default_value", "boolean"}, name, &a));
    if (v.is_undefined() || (a[1].Truthy() && !v.Truthy())) {
      return a[0].is_undefined() ? Value::String("") : a[0];
    }
    return v;
  }
  if (name == "trim") {
    RETURN_IF_ERROR(BindArgs(args, {"chars"}, name, &a));
    std::optional<std::string> chars;
    if (a[0].is_string()) chars = a[0].str();
    return in.MakeString(PyStrip(Str(v), chars, true, true), v.is_markup());
  }
  if (name == "upper") return in.MakeString(PyUpper(Str(v)), v.is_markup());
  if (name == "lower") return in.MakeString(PyLower(Str(v)), v.is_markup());
  if (name == "capitalize") return in.MakeString(PyCapitalize(Str(v)), v.is_markup());
  if (name == "title") return in.MakeString(JinjaTitle(Str(v)), v.is_markup());
  if (name == "string") return v.is_string() ? v : in.MakeString(Str(v));
  if (name == "safe") return v.is_markup() ? v : in.MakeString(Str(v), /*markup=*/true);
  if (name == "e" || name == "escape" || name == "forceescape") {
    if (v.is_markup() && name != "forceescape") return v;
    return in.MakeString(HtmlEscape(Str(v)), /*markup=*/true);
  }
  if (name == "replace") {
    RETURN_IF_ERROR(BindArgs(args, {"old", "new", "count"}, name, &a));
    const int64_t count = a[2].is_int() ? a[2].int_value() : -1;
    return in.MakeString(PyReplace(Str(v), Str(a[0]), Str(a[1]), count));
  }
  if (name == "int") return ToInt(v, args);
  if (name == "float") return ToFloat(v, args);
  if (name == "round") return Round(v, args);
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
    if (v.is_int() || v.is_bool()) return UnaryOp(v, v.int_value() < 0);
    return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "indent") return Indent(in, v, args);
  if (name == "truncate") return Truncate(in, v, args);
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : CodePoints(Str(v))) {
      std::string ch;
      AppendUtf8(c, &ch);
      const bool w = c == '_' || PyIsAlnum(ch);
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value::Int(words);
  }
  if (name == "center") {
    RETURN_IF_ERROR(BindArgs(args, {"width"}, name, &a));
    const std::string s = Str(v);
    const int64_t width = a[0].is_int() ? std::min<int64_t>(a[0].int_value(), 1 << 20) : 80;
    const int64_t marg = width - PyLen(s);
    if (marg <= 0) return in.MakeString(s);
    const int64_t left = marg / 2 + (marg & width & 1);
    return in.MakeString(std::string(left, ' ') + s + std::string(marg - left, ' '));
  }
  if (name == "format") {
    if (!args.positional.empty() && !args.keyword.empty()) {
      return absl::InvalidArgumentError(
          "can't handle positional and keyword arguments at the same time");
    }
    return BinaryOp(in, "%", Value::String(Str(v)), Value::List(args.positional, true));
  }
  return absl::NotFoundError(absl::StrCat("No filter named '", name, "'."));
}

}  // namespace linfer::tokenizer::jinja
