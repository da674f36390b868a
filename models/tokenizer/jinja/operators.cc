// Python operator semantics for interpreter values (see operators.h).
#include "models/tokenizer/jinja/operators.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/py_format.h"
#include "models/tokenizer/jinja/py_string.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::jinja {
namespace {

absl::Status TypeError(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", msg));
}

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", v.str()));
}

absl::Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

absl::Status ZeroDivision(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("ZeroDivisionError: ", msg));
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

double PyFmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  if (m == 0) m = std::copysign(0.0, b);
  return m;
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (IsIntLike(a) && IsIntLike(b)) {
    const int64_t x = a.int_value(), y = b.int_value();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    if (op == "/") {
      if (y == 0) return ZeroDivision("division by zero");
      return Value::Float(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) return ZeroDivision("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1)
        return absl::InvalidArgumentError(
            "OverflowError: integer overflow (this engine has 64-bit ints)");
      r = op == "//" ? FloorDiv(x, y) : x - FloorDiv(x, y) * y;
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) return ZeroDivision("0.0 cannot be raised to a negative power");
        return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      r = 1;
      for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
    }
    if (overflow)
      return absl::InvalidArgumentError(
          "OverflowError: integer overflow (this engine has 64-bit ints)");
    return Value::Int(r);
  }
  const double x = a.AsDouble(), y = b.AsDouble();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") {
    if (x == 0 && y < 0) return ZeroDivision("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) {
      return absl::InvalidArgumentError("ValueError: complex results are not supported");
    }
    return Value::Float(std::pow(x, y));
  }
  if (y == 0) return ZeroDivision("float division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") return Value::Float(std::floor(x / y));
  return Value::Float(PyFmod(x, y));
}

absl::StatusOr<Value> Repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (n > 0 && static_cast<int64_t>(seq.str().size()) > in.limits().max_output_bytes / n) {
      return absl::ResourceExhaustedError("template built a string longer than the output limit");
    }
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return in.MakeString(std::move(out), seq.is_markup());
  }
  if (n > 0 && static_cast<int64_t>(seq.list().size()) > in.limits().max_loop_iterations / n) {
    return absl::ResourceExhaustedError("template built a list longer than the loop limit");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return in.MakeList(std::move(out), seq.is_tuple());
}

// One printf conversion of `str % args` with flags, width and precision: s r d i x X o f F e E
// g G (C's printf agrees with Python's %-formatting for these).
absl::StatusOr<std::string> FormatOne(const std::string& spec, char conv, const Value& v) {
  if (conv == 's' || conv == 'r') {
    std::string text = conv == 's' ? Str(v) : Repr(v);
    const size_t dot = spec.find('.');
    const std::string flags_width = spec.substr(0, dot);
    if (dot != std::string::npos) {
      const std::vector<char32_t> cps = CodePoints(text);
      text = FromCodePoints(cps, 0, std::strtoul(spec.c_str() + dot + 1, nullptr, 10));
    }
    const bool left = flags_width.find('-') != std::string::npos;
    const size_t digits = flags_width.find_first_of("123456789");
    const int64_t width =
        digits == std::string::npos ? 0 : std::strtol(flags_width.c_str() + digits, nullptr, 10);
    const int64_t pad = std::max<int64_t>(0, width - PyLen(text));
    return left ? text + std::string(pad, ' ') : std::string(pad, ' ') + text;
  }
  if (!v.is_number()) {
    return TypeError(absl::StrCat("%", std::string(1, conv),
                                  " format: a real number is required, not ", v.TypeName()));
  }
  const std::string c_spec = "%" + spec;
  char buf[512];
  if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
    const auto n =
        static_cast<long long>(v.is_float() ? std::trunc(v.float_value()) : v.int_value());
    const std::string f = c_spec + "ll" + std::string(1, conv == 'i' ? 'd' : conv);
    std::snprintf(buf, sizeof(buf), f.c_str(), n);
  } else {
    std::snprintf(buf, sizeof(buf), (c_spec + std::string(1, conv)).c_str(), v.AsDouble());
  }
  return std::string(buf);
}

// printf-style `str % args`.
absl::StatusOr<Value> Format(Interpreter& in, const Value& fmt, const Value& args) {
  std::vector<Value> values = args.is_tuple() ? args.list() : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  const std::string& f = fmt.str();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    size_t j = i + 1;
    while (j < f.size() && std::string_view("-+ #0").find(f[j]) != std::string_view::npos) ++j;
    while (j < f.size() && (std::isdigit(static_cast<unsigned char>(f[j])) || f[j] == '.')) ++j;
    if (j >= f.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    const std::string spec = f.substr(i + 1, j - i - 1);
    const char conv = f[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (spec.size() > 8 || std::string_view("srdixXofFeEgG").find(conv) == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("ValueError: unsupported format character '", std::string(1, conv), "'"));
    }
    if (next >= values.size()) return TypeError("not enough arguments for format string");
    ASSIGN_OR_RETURN(std::string piece, FormatOne(spec, conv, values[next++]));
    out += piece;
  }
  if (next < values.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return in.MakeString(std::move(out), fmt.is_markup());
}

}  // namespace

absl::StatusOr<Value> BinaryOp(Interpreter& in, const std::string& op, const Value& a,
                               const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) {
    // markupsafe: concatenating Markup with a plain str escapes the plain side.
    const bool markup = a.is_markup() || b.is_markup();
    const std::string left = markup && !a.is_markup() ? HtmlEscape(a.str()) : a.str();
    const std::string right = markup && !b.is_markup() ? HtmlEscape(b.str()) : b.str();
    if (left.size() + right.size() > static_cast<size_t>(in.limits().max_output_bytes)) {
      return absl::ResourceExhaustedError("template built a string longer than the output limit");
    }
    return in.MakeString(left + right, markup);
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    if (static_cast<int64_t>(a.list().size() + b.list().size()) > in.limits().max_loop_iterations) {
      return absl::ResourceExhaustedError("template built a list longer than the loop limit");
    }
    RETURN_IF_ERROR(in.Charge(kItemCost * static_cast<int64_t>(a.list().size() + b.list().size())));
    std::vector<Value> items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return in.MakeList(std::move(items), a.is_tuple());
  }
  if (op == "+" && (a.is_string() || a.is_list())) {
    return TypeError(absl::StrCat("can only concatenate ", a.TypeName(), " (not \"", b.TypeName(),
                                  "\") to ", a.TypeName()));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && IsIntLike(b)) {
    return Repeat(in, a, b.int_value());
  }
  if (op == "*" && (b.is_string() || b.is_list()) && IsIntLike(a)) {
    return Repeat(in, b, a.int_value());
  }
  if (op == "%" && a.is_string()) return Format(in, a, b);
  return Unsupported(op, a, b);
}

absl::StatusOr<Value> UnaryOp(const Value& a, bool negate) {
  if (a.is_undefined()) return UndefinedError(a);
  if (a.is_float()) return Value::Float(negate ? -a.float_value() : a.float_value());
  if (a.is_int() || a.is_bool()) {
    if (negate && a.int_value() == INT64_MIN)
      return absl::InvalidArgumentError(
          "OverflowError: integer overflow (this engine has 64-bit ints)");
    return Value::Int(negate ? -a.int_value() : a.int_value());
  }
  return TypeError(
      absl::StrCat("bad operand type for unary ", negate ? "-" : "+", ": '", a.TypeName(), "'"));
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.AsDouble() == b.AsDouble();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.SameAs(b);
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.AsDouble() < b.AsDouble();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return TypeError(absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '",
                                b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(Interpreter& in, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(container.str().size())));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(container.list().size())));
      for (const Value& v : container.list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict()) {
        return TypeError(absl::StrCat("unhashable type: '", item.TypeName(), "'"));
      }
      return container.dict().Find(item) != nullptr;
    default:
      return TypeError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<Value> IndexSequence(Interpreter& in, const Value& obj, int64_t index) {
  const bool is_str = obj.is_string();
  std::vector<char32_t> cps;
  if (is_str) {
    RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(obj.str().size())));
    cps = CodePoints(obj.str());
  }
  const auto n = static_cast<int64_t>(is_str ? cps.size() : obj.list().size());
  const int64_t i = index < 0 ? index + n : index;
  if (i < 0 || i >= n) {
    return Value::Undefined(absl::StrCat(obj.TypeName(), " object has no element ", index));
  }
  if (is_str) return Value::String(FromCodePoints(cps, i, i + 1), obj.is_markup());
  return obj.list()[i];
}

absl::StatusOr<Value> SliceSequence(Interpreter& in, const Value& obj, const Value& start,
                                    const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_undefined() && !v->is_none() && !IsIntLike(*v)) {
      return TypeError("slice indices must be integers or None or have an __index__ method");
    }
  }
  const int64_t st = IsIntLike(step) ? step.int_value() : 1;
  if (st == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  const bool is_str = obj.is_string();
  std::vector<char32_t> cps;
  if (is_str) {
    RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(obj.str().size())));
    cps = CodePoints(obj.str());
  }
  const auto n = static_cast<int64_t>(is_str ? cps.size() : obj.list().size());
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!IsIntLike(v)) return dflt;
    int64_t i = v.int_value();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<size_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
  if (is_str) {
    std::string out;
    for (size_t i : picks) AppendUtf8(cps[i], &out);
    return in.MakeString(std::move(out), obj.is_markup());
  }
  std::vector<Value> out;
  out.reserve(picks.size());
  for (size_t i : picks) out.push_back(obj.list()[i]);
  return in.MakeList(std::move(out), obj.is_tuple());
}

}  // namespace linfer::tokenizer::jinja
