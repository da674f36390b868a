// str()/repr()/json.dumps of interpreter values, byte-exact with CPython (see py_format.h).
#include "models/tokenizer/jinja/py_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/py_string.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::jinja {
namespace {

void AppendJsonString(absl::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : CodePoints(s)) {
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        *out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        *out += absl::StrFormat("\\u%04x", static_cast<uint32_t>(c));
      }
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FormatFloat(d);
}

// The JSON text of a dict key (json.dumps converts int/float/bool/None keys to strings).
absl::StatusOr<std::string> JsonKey(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.str();
    case Value::Kind::kInt:
      return absl::StrCat(k.int_value());
    case Value::Kind::kFloat:
      return JsonFloat(k.float_value());
    case Value::Kind::kBool:
      return std::string(k.bool_value() ? "true" : "false");
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "TypeError: keys must be str, int, float, bool or None, not ", k.TypeName()));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : o_(o) {}

  absl::Status Write(const Value& v, int level, std::string* out) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        *out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        *out += v.bool_value() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        *out += absl::StrCat(v.int_value());
        return absl::OkStatus();
      case Value::Kind::kFloat:
        *out += JsonFloat(v.float_value());
        return absl::OkStatus();
      case Value::Kind::kString:
        AppendJsonString(v.str(), o_.ensure_ascii, out);
        return absl::OkStatus();
      case Value::Kind::kList:
        return WriteList(v, level, out);
      case Value::Kind::kDict:
        return WriteDict(v, level, out);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("TypeError: Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

 private:
  // Newline plus indentation for `level`, or "" without indent.
  std::string Break(int level) const {
    if (!o_.indent.has_value()) return "";
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += *o_.indent;
    return s;
  }

  absl::Status WriteList(const Value& v, int level, std::string* out) {
    if (v.list().empty()) {
      *out += "[]";
      return absl::OkStatus();
    }
    *out += "[" + Break(level + 1);
    bool first = true;
    for (const Value& item : v.list()) {
      if (!first) *out += o_.item_separator + Break(level + 1);
      first = false;
      RETURN_IF_ERROR(Write(item, level + 1, out));
    }
    *out += Break(level) + "]";
    return absl::OkStatus();
  }

  absl::Status WriteDict(const Value& v, int level, std::string* out) {
    const auto& items = v.dict().items;
    if (items.empty()) {
      *out += "{}";
      return absl::OkStatus();
    }
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (o_.sort_keys) RETURN_IF_ERROR(SortKeys(items, &order));
    *out += "{" + Break(level + 1);
    bool first = true;
    for (size_t i : order) {
      if (!first) *out += o_.item_separator + Break(level + 1);
      first = false;
      ASSIGN_OR_RETURN(std::string key, JsonKey(items[i].first));
      AppendJsonString(key, o_.ensure_ascii, out);
      *out += o_.key_separator;
      RETURN_IF_ERROR(Write(items[i].second, level + 1, out));
    }
    *out += Break(level) + "}";
    return absl::OkStatus();
  }

  static absl::Status SortKeys(const std::vector<std::pair<Value, Value>>& items,
                               std::vector<size_t>* order) {
    const bool strings = items[0].first.is_string();
    for (const auto& [k, unused] : items) {
      if (k.is_string() != strings || (!strings && !k.is_number())) {
        return absl::InvalidArgumentError(
            "TypeError: '<' not supported between instances of dict keys of different types");
      }
    }
    std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
      const Value& x = items[a].first;
      const Value& y = items[b].first;
      return strings ? x.str() < y.str() : x.AsDouble() < y.AsDouble();
    });
    return absl::OkStatus();
  }

  const JsonDumpOptions& o_;
};

template <typename JsonT>
absl::StatusOr<Value> Convert(const JsonT& j, int depth) {
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("input JSON is nested deeper than ", kMaxDepth, " levels"));
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(LossyUtf8(j.template get_ref<const std::string&>()));
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        ASSIGN_OR_RETURN(Value item, Convert(e, depth + 1));
        items.push_back(std::move(item));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto dict = std::make_shared<DictData>();
      for (auto it = j.begin(); it != j.end(); ++it) {
        ASSIGN_OR_RETURN(Value item, Convert(it.value(), depth + 1));
        dict->Set(Value::String(LossyUtf8(it.key())), std::move(item));
      }
      return Value::Dict(std::move(dict));
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  return absl::InvalidArgumentError("unsupported JSON value (binary)");
}

}  // namespace

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    return out + absl::StrFormat("e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::string Str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.str();
    default:
      return Repr(v);
  }
}

namespace {

// Containers nested deeper than this print as "..." (Python prints a recursive container as
// [...]): lists nest at most 512 levels (MakeList), but namespaces held in lists can chain them,
// and the recursion must not overflow the stack.
constexpr int kMaxReprDepth = 1024;

std::string ReprAt(const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.int_value());
    case Value::Kind::kFloat:
      return FormatFloat(v.float_value());
    case Value::Kind::kString:
      return v.is_markup() ? "Markup(" + PyRepr(v.str()) + ")" : PyRepr(v.str());
    case Value::Kind::kList: {
      if (depth > kMaxReprDepth) return v.is_tuple() ? "(...)" : "[...]";
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += ", ";
        out += ReprAt(v.list()[i], depth + 1);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::kDict: {
      if (depth > kMaxReprDepth) return "{...}";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += ReprAt(k, depth + 1) + ": " + ReprAt(item, depth + 1);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      if (depth > kMaxReprDepth) return "<Namespace {...}>";
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, item] : v.ns().attrs) {
        if (!first) out += ", ";
        first = false;
        out += PyRepr(k) + ": " + ReprAt(item, depth + 1);
      }
      return out + "}>";
    }
    case Value::Kind::kCallable:
      return "<function " + v.callable().name + ">";
  }
  return "";
}

}  // namespace

std::string Repr(const Value& v) { return ReprAt(v, 0); }

absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(JsonWriter(options).Write(v, 0, &out));
  return out;
}

absl::StatusOr<Value> FromJson(const nlohmann::json& j) { return Convert(j, 0); }
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j) { return Convert(j, 0); }

}  // namespace linfer::tokenizer::jinja
