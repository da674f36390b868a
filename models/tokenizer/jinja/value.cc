// Construction, truthiness and type names of interpreter values.
#include "models/tokenizer/jinja/value.h"

#include <algorithm>

namespace linfer::tokenizer::jinja {
namespace {

const std::vector<Value>& EmptyList() {
  static const auto* empty = new std::vector<Value>();
  return *empty;
}

const std::string& EmptyString() {
  static const auto* empty = new std::string();
  return *empty;
}

}  // namespace

Value Value::Undefined(std::string hint, bool unsafe) {
  Value v;
  v.kind_ = Kind::kUndefined;
  v.flag_ = unsafe;
  v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.flag_ = b;
  v.num_.i = b ? 1 : 0;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.num_.i = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.num_.f = f;
  return v;
}

Value Value::String(std::string s, bool markup) {
  Value v;
  v.kind_ = Kind::kString;
  v.flag_ = markup;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.flag_ = tuple;
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  data->depth = depth + 1;
  data->items = std::move(items);
  v.ptr_ = std::move(data);
  return v;
}

Value Value::Dict(std::shared_ptr<const DictData> dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.ptr_ = std::const_pointer_cast<DictData>(std::move(dict));
  return v;
}

Value Value::Namespace(std::shared_ptr<NamespaceData> ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ptr_ = std::move(ns);
  return v;
}

Value Value::Callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
}

double Value::AsDouble() const { return is_float() ? num_.f : static_cast<double>(num_.i); }

const std::string& Value::str() const {
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : EmptyString();
}

const std::vector<Value>& Value::list() const {
  return is_list() ? static_cast<const ListData*>(ptr_.get())->items : EmptyList();
}

int Value::depth() const {
  if (is_list()) return static_cast<const ListData*>(ptr_.get())->depth;
  if (is_dict()) return dict().depth;
  return 0;
}

bool Value::SameAs(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return flag_ == other.flag_;
    case Kind::kInt:
      return num_.i == other.num_.i;
    case Kind::kFloat:
      return num_.f == other.num_.f;
    case Kind::kString:
      return ptr_ == other.ptr_ || str() == other.str();
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace:
    case Kind::kCallable:
      return ptr_ == other.ptr_;
  }
  return false;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return flag_;
    case Kind::kInt:
      return num_.i != 0;
    case Kind::kFloat:
      return num_.f != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return flag_ ? "Markup" : "str";
    case Kind::kList:
      return flag_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

void DictData::Set(Value key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  if (key.is_string()) {
    auto it = string_index.find(key.str());
    if (it != string_index.end()) {
      items[it->second].second = std::move(value);
      return;
    }
    string_index.emplace(key.str(), items.size());
  } else {
    for (auto& [k, v] : items) {
      if (k.is_string()) continue;
      // Python hashes equal numbers alike: 1, 1.0 and True are one key (the first one stays).
      if (k.is_number() && key.is_number() ? k.AsDouble() == key.AsDouble() : k.SameAs(key)) {
        v = std::move(value);
        return;
      }
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* DictData::Find(absl::string_view key) const {
  auto it = string_index.find(key);
  return it == string_index.end() ? nullptr : &items[it->second].second;
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return Find(absl::string_view(key.str()));
  for (const auto& [k, v] : items) {
    if (k.is_string()) continue;
    // Python hashes equal numbers alike: 1 == 1.0 == True.
    if (k.is_number() && key.is_number() ? k.AsDouble() == key.AsDouble() : k.SameAs(key)) {
      return &v;
    }
  }
  return nullptr;
}

const Value* NamespaceData::Find(absl::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void NamespaceData::Set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

}  // namespace linfer::tokenizer::jinja
