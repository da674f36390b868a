// Sequence filters of jinja2.filters (first, last, join, list, items, map, select/reject,
// selectattr/rejectattr, unique, reverse, sort, dictsort, batch, sum, min, max, attr) and the
// filter dispatcher.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

// jinja2's make_attrgetter: dotted path of item lookups ("a.0.b"); optional lower-casing.
absl::StatusOr<Value> GetPath(Interpreter& in, Value item, const Value& attribute,
                              bool ignore_case) {
  if (attribute.is_string()) {
    for (absl::string_view part : absl::StrSplit(attribute.str(), '.')) {
      const bool digits = !part.empty() && PyIsDigit(part);
      const Value key = digits ? Value::Int(std::strtoll(std::string(part).c_str(), nullptr, 10))
                               : Value::String(std::string(part));
      ASSIGN_OR_RETURN(item, in.GetItem(item, key));
    }
  } else if (!attribute.is_undefined() && !attribute.is_none()) {
    ASSIGN_OR_RETURN(item, in.GetItem(item, attribute));
  }
  if (ignore_case && item.is_string()) return Value::String(PyLower(item.str()));
  return item;
}

// Stable sort of `items` by `keys` with Python's <, propagating TypeErrors.
absl::Status SortByKeys(std::vector<Value>* items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> less = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> Sort(Interpreter& in, const Value& v, CallArgs& args, bool dictsort) {
  std::vector<Value> a;
  std::vector<Value> items;
  if (dictsort) {
    RETURN_IF_ERROR(BindArgs(args, {"case_sensitive", "by", "reverse"}, "dictsort", &a));
    if (!v.is_dict()) return TypeError("dictsort expects a mapping");
    for (const auto& [k, x] : v.dict().items) items.push_back(Value::List({k, x}, true));
  } else {
    RETURN_IF_ERROR(BindArgs(args, {"reverse", "case_sensitive", "attribute"}, "sort", &a));
    ASSIGN_OR_RETURN(items, in.Iterate(v));
  }
  const bool case_sensitive = dictsort ? a[0].Truthy() : a[1].Truthy();
  const bool reverse = dictsort ? a[2].Truthy() : a[0].Truthy();
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (dictsort) {
      const bool by_value = a[1].is_string() && a[1].str() == "value";
      key = item.list()[by_value ? 1 : 0];
    } else {
      ASSIGN_OR_RETURN(key, GetPath(in, item, a[2], false));
    }
    if (!case_sensitive && key.is_string()) key = Value::String(PyLower(key.str()));
    keys.push_back(std::move(key));
  }
  RETURN_IF_ERROR(SortByKeys(&items, keys, reverse));
  return in.MakeList(std::move(items));
}

// select/reject/selectattr/rejectattr.
absl::StatusOr<Value> Select(Interpreter& in, const Value& v, CallArgs& args, bool keep,
                             bool by_attr) {
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> rest = args.positional;
  Value attr;
  if (by_attr) {
    if (rest.empty()) return TypeError("missing attribute argument");
    attr = rest[0];
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x,
                     by_attr ? GetPath(in, item, attr, false) : absl::StatusOr<Value>(item));
    bool pass = x.Truthy();
    if (!rest.empty()) {
      if (!rest[0].is_string()) return TypeError("test name must be a string");
      CallArgs test_args{std::vector<Value>(rest.begin() + 1, rest.end()), args.keyword};
      ASSIGN_OR_RETURN(pass, in.ApplyTest(rest[0].str(), x, std::move(test_args)));
    }
    if (pass == keep) out.push_back(item);
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& in, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute, dflt;
    for (const auto& [k, x] : args.keyword) {
      if (k == "attribute") {
        attribute = x;
      } else if (k == "default") {
        dflt = x;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("Unexpected keyword argument '", k, "'"));
      }
    }
    if (attribute.is_undefined()) return TypeError("map requires a filter or attribute");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, GetPath(in, item, attribute, false));
      out.push_back(x.is_undefined() && !dflt.is_undefined() && !dflt.is_none() ? dflt : x);
    }
    return in.MakeList(std::move(out));
  }
  if (!args.positional[0].is_string()) return TypeError("filter name must be a string");
  const std::string name = args.positional[0].str();
  for (const Value& item : items) {
    CallArgs fargs{std::vector<Value>(args.positional.begin() + 1, args.positional.end()),
                   args.keyword};
    ASSIGN_OR_RETURN(Value x, in.ApplyFilter(name, item, std::move(fargs)));
    out.push_back(std::move(x));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> Unique(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"case_sensitive", "attribute"}, "unique", &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, GetPath(in, item, a[1], !a[0].Truthy()));
    if (key.is_list() || key.is_dict()) {
      return TypeError(absl::StrCat("unhashable type: '", key.TypeName(), "'"));
    }
    RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(seen.size())));
    bool dup = false;
    for (const Value& s : seen) dup = dup || Equals(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> Aggregate(Interpreter& in, const Value& v, CallArgs& args, bool is_max) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"case_sensitive", "attribute"}, is_max ? "max" : "min", &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  ASSIGN_OR_RETURN(Value best_key, GetPath(in, items[0], a[1], !a[0].Truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value key, GetPath(in, items[i], a[1], !a[0].Truthy()));
    ASSIGN_OR_RETURN(bool better, is_max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

absl::StatusOr<Value> Sum(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"attribute", "start"}, "sum", &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
  if (total.is_string()) return TypeError("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x, GetPath(in, item, a[0], false));
    ASSIGN_OR_RETURN(total, BinaryOp(in, "+", total, x));
  }
  return total;
}

absl::StatusOr<Value> Batch(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"linecount", "fill_with"}, "batch", &a));
  if (!a[0].is_int() || a[0].int_value() <= 0)
    return TypeError("batch size must be a positive int");
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  const auto n = static_cast<size_t>(a[0].int_value());
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += n) {
    std::vector<Value> row(items.begin() + i, items.begin() + std::min(items.size(), i + n));
    while (row.size() < n && !a[1].is_undefined() && !a[1].is_none()) row.push_back(a[1]);
    ASSIGN_OR_RETURN(Value r, in.MakeList(std::move(row)));
    out.push_back(std::move(r));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> Join(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(BindArgs(args, {"d", "attribute"}, "join", &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  const std::string sep = a[0].is_undefined() ? "" : Str(a[0]);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value x, GetPath(in, items[i], a[1], false));
    if (i > 0) out += sep;
    out += Str(x);
    if (static_cast<int64_t>(out.size()) > in.limits().max_output_bytes) break;
  }
  return in.MakeString(std::move(out));
}

absl::StatusOr<Value> FirstOrLast(Interpreter& in, const Value& v, bool first) {
  if (v.is_undefined() && !first) return TypeError("'Undefined' object is not reversible");
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty()) {
    return Value::Undefined(
        absl::StrCat("No ", first ? "first" : "last", " item, sequence was empty."));
  }
  return first ? items.front() : items.back();
}

}  // namespace

absl::StatusOr<Value> CallSequenceFilter(Interpreter& in, const std::string& name, const Value& v,
                                         CallArgs& args) {
  if (name == "first" || name == "last") return FirstOrLast(in, v, name == "first");
  if (name == "join") return Join(in, v, args);
  if (name == "list") {
    ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
    return in.MakeList(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return in.MakeList({});
    if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value::List({k, x}, true));
    return in.MakeList(std::move(out));
  }
  if (name == "map") return Map(in, v, args);
  if (name == "select" || name == "reject") return Select(in, v, args, name == "select", false);
  if (name == "selectattr" || name == "rejectattr") {
    return Select(in, v, args, name == "selectattr", true);
  }
  if (name == "unique") return Unique(in, v, args);
  if (name == "reverse") {
    if (v.is_string()) return SliceSequence(in, v, Value(), Value(), Value::Int(-1));
    ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
    std::reverse(items.begin(), items.end());
    return in.MakeList(std::move(items));
  }
  if (name == "sort" || name == "dictsort") return Sort(in, v, args, name == "dictsort");
  if (name == "min" || name == "max") return Aggregate(in, v, args, name == "max");
  if (name == "sum") return Sum(in, v, args);
  if (name == "batch") return Batch(in, v, args);
  if (name == "attr") {
    std::vector<Value> a;
    RETURN_IF_ERROR(BindArgs(args, {"name"}, name, &a));
    if (!a[0].is_string()) return TypeError("attribute name must be a string");
    if (std::optional<Value> m = BoundMethod(v, a[0].str())) return *m;
    if (v.is_namespace()) {
      if (const Value* x = v.ns().Find(a[0].str())) return *x;
    }
    return Value::Undefined(
        absl::StrCat("'", v.TypeName(), " object' has no attribute '", a[0].str(), "'"));
  }
  return absl::NotFoundError(absl::StrCat("No filter named '", name, "'."));
}

absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& v,
                                 CallArgs& args) {
  absl::StatusOr<Value> r = CallSequenceFilter(in, name, v, args);
  if (!absl::IsNotFound(r.status())) return r;
  return CallTextFilter(in, name, v, args);
}

}  // namespace linfer::tokenizer::jinja
