// JSON Schema -> Grammar (json_grammar.h declares it). One pass over the schema with a memo keyed
// by schema object, so that $ref cycles (recursive schemas) become cycles in the node graph; a node
// is allocated before its children compile. Alternatives (anyOf, oneOf, type lists, nullable)
// become a union dispatched on the first byte; overlapping alternatives are refused, except literal
// sets (merged) and integer + number (number).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "engine/structured/json_bounds.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/schema_regex.h"

namespace linfer::structured {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Keywords that constrain values in ways this grammar cannot express: refused, never ignored.
const std::set<std::string>& Refused() {
  static const auto* s = new std::set<std::string>{"multipleOf",
                                                   "minProperties",
                                                   "maxProperties",
                                                   "contains",
                                                   "minContains",
                                                   "maxContains",
                                                   "prefixItems",
                                                   "if",
                                                   "then",
                                                   "else",
                                                   "not",
                                                   "dependentRequired",
                                                   "dependentSchemas",
                                                   "dependencies",
                                                   "propertyNames",
                                                   "patternProperties",
                                                   "unevaluatedProperties",
                                                   "unevaluatedItems",
                                                   "additionalItems",
                                                   "contentSchema",
                                                   "$dynamicRef",
                                                   "$recursiveRef"};
  return *s;
}

// Keywords that say what a value is (as opposed to combining schemas).
const std::set<std::string>& Shape() {
  static const auto* s = new std::set<std::string>{"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "minItems",
                                                   "maxItems",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "enum",
                                                   "const",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum"};
  return *s;
}

std::string Printable(uint8_t b) {
  if (b >= 0x20 && b < 0x7F) return absl::StrCat("'", std::string(1, static_cast<char>(b)), "'");
  return absl::StrCat("byte ", static_cast<int>(b));
}

bool TypeMatches(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double x = v.get<double>();
    return std::isfinite(x) && std::trunc(x) == x;
  }
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class Compiler {
 public:
  Compiler(const Json& root, const RegexBudget& budget) : root_(root), regexes_(budget) {}

  absl::StatusOr<int32_t> Compile(const Json& s, const std::string& path) {
    if (depth_ >= kMaxSchemaNesting) {  // $ref chains nest without nesting the text
      return Invalid(
          path, absl::StrCat("nests deeper than ", kMaxSchemaNesting, " schemas (counting $refs)"));
    }
    ++depth_;
    absl::StatusOr<int32_t> n = CompileSchema(s, path);
    --depth_;
    return n;
  }

  absl::StatusOr<int32_t> CompileSchema(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return Any();
      return Invalid(path, "false admits no value");
    }
    if (!s.is_object()) return Invalid(path, "expected a schema (an object or a boolean)");
    if (auto it = memo_.find(&s); it != memo_.end()) return it->second;
    for (const auto& [key, value] : s.items()) {
      const bool unique = key == "uniqueItems" && !(value.is_boolean() && !value.get<bool>());
      if (Refused().count(key) || unique) {
        return Invalid(absl::StrCat(path, ".", key),
                       "not supported (structured output cannot enforce it)");
      }
      // A nested base URI would move where "#/…" points: refs resolve against the root only.
      if (&s != &root_ && (key == "$id" || key == "$anchor" || key == "$dynamicAnchor")) {
        return Invalid(absl::StrCat(path, ".", key), "not supported below the root schema");
      }
    }
    if (const Json* ref = Member(s, "$ref")) return CompileRef(s, *ref, path);
    if (const Json* all = Member(s, "allOf")) {
      if (!all->is_array() || all->size() != 1 || HasShape(s) || Member(s, "anyOf") ||
          Member(s, "oneOf")) {
        return Invalid(absl::StrCat(path, ".allOf"),
                       "only an allOf of one schema, alone, is supported");
      }
      return Alias(s, (*all)[0], absl::StrCat(path, ".allOf[0]"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const Json* alts = Member(s, key)) return CompileAlternatives(s, *alts, key, path);
    }
    return CompileShape(s, path);
  }

  Grammar& grammar() { return g_; }

 private:
  absl::StatusOr<int32_t> Any() {
    if (g_.any >= 0) return g_.any;
    ASSIGN_OR_RETURN(int32_t any, NewNode(Node::Kind::kUnion, ""));
    g_.any = any;
    ASSIGN_OR_RETURN(int32_t map, NewNode(Node::Kind::kMap, ""));
    g_.nodes[map].value = any;
    ASSIGN_OR_RETURN(int32_t array, NewNode(Node::Kind::kArray, ""));
    g_.nodes[array].value = any;
    ASSIGN_OR_RETURN(int32_t str, NewNode(Node::Kind::kString, ""));
    ASSIGN_OR_RETURN(int32_t num, NewNode(Node::Kind::kNumber, ""));
    ASSIGN_OR_RETURN(int32_t lit, Literals({"true", "false", "null"}, ""));
    std::vector<int32_t>& d = g_.nodes[any].dispatch;
    d.assign(256, -1);
    d['{'] = map;
    d['['] = array;
    d['"'] = str;
    d['-'] = num;
    for (int c = '0'; c <= '9'; ++c) d[c] = num;
    d['t'] = d['f'] = d['n'] = lit;
    for (int32_t n : {any, map, array, str, num, lit}) done_[n] = true;
    return any;
  }

  static const Json* Member(const Json& s, const char* key) {
    auto it = s.find(key);
    return it == s.end() ? nullptr : &*it;
  }
  static bool HasShape(const Json& s) {
    for (const auto& [key, value] : s.items()) {
      if (Shape().count(key)) return true;
    }
    return false;
  }

  absl::StatusOr<int32_t> NewNode(Node::Kind kind, const std::string& path) {
    if (g_.nodes.size() >= kMaxNodes) {
      return Invalid(path.empty() ? "schema" : path,
                     absl::StrCat("the schema compiles to more than ", kMaxNodes, " nodes"));
    }
    g_.nodes.emplace_back();
    g_.nodes.back().kind = kind;
    done_.push_back(false);
    return static_cast<int32_t>(g_.nodes.size() - 1);
  }

  absl::StatusOr<int32_t> Literals(const std::vector<std::string>& texts, const std::string& path) {
    ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kLiterals, path));
    LiteralTrie trie;
    for (size_t i = 0; i < texts.size(); ++i) {
      literal_bytes_ += texts[i].size();
      if (literal_bytes_ > kMaxLiteralBytes) {
        return Invalid(path.empty() ? "schema" : path,
                       absl::StrCat("the schema's literals exceed ", kMaxLiteralBytes, " bytes"));
      }
      trie.Add(texts[i], static_cast<int32_t>(i));
    }
    g_.nodes[n].literals = static_cast<int32_t>(g_.tries.size());
    g_.tries.push_back(std::move(trie));
    done_[n] = true;
    return n;
  }

  // A schema that is another one (a $ref, an allOf of one): compiled once, shared.
  absl::StatusOr<int32_t> Alias(const Json& s, const Json& target, const std::string& path) {
    if (!resolving_.insert(&s).second) return Invalid(path, "circular reference");
    absl::StatusOr<int32_t> n = Compile(target, path);
    resolving_.erase(&s);
    if (n.ok()) memo_[&s] = *n;
    return n;
  }

  absl::StatusOr<int32_t> CompileRef(const Json& s, const Json& ref, const std::string& path) {
    const std::string where = absl::StrCat(path, ".$ref");
    if (!ref.is_string()) return Invalid(where, "expected a string");
    if (HasShape(s) || Member(s, "anyOf") || Member(s, "oneOf") || Member(s, "allOf")) {
      return Invalid(where, "a $ref beside other constraints is not supported");
    }
    const std::string r = ref.get<std::string>();
    const Json* target = Target(r);
    if (target == nullptr) {
      return Invalid(where, absl::StrCat("'", r.substr(0, 64),
                                         "' is not a local #/$defs/… or #/definitions/… entry"));
    }
    if (target == &root_) return Alias(s, root_, where);
    return Alias(s, *target, absl::StrCat(where, "(", r.substr(0, 64), ")"));
  }

  // The schema a local $ref names ("#", "#/$defs/NAME", "#/definitions/NAME"), or null.
  const Json* Target(const std::string& r) const {
    if (r == "#") return &root_;
    for (const char* defs : {"$defs", "definitions"}) {
      const std::string prefix = absl::StrCat("#/", defs, "/");
      if (r.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string name = r.substr(prefix.size());
      const Json* d = Member(root_, defs);
      if (d == nullptr || !d->is_object() || name.find('/') != std::string::npos) return nullptr;
      auto it = d->find(name);
      return it == d->end() ? nullptr : &*it;
    }
    return nullptr;
  }

  absl::StatusOr<int32_t> CompileAlternatives(const Json& s, const Json& alts, const char* key,
                                              const std::string& path) {
    const std::string where = absl::StrCat(path, ".", key);
    if (!alts.is_array() || alts.empty()) return Invalid(where, "expected a non-empty array");
    if (HasShape(s)) {
      return Invalid(where,
                     absl::StrCat(key, " beside type, properties, enum, … is not supported"));
    }
    // oneOf: exactly one alternative may match. Alternatives that each state their JSON types
    // (type, enum or const), pairwise disjoint (checked in Union), cannot both match.
    const bool exclusive = std::string(key) == "oneOf";
    for (size_t i = 0; exclusive && i < alts.size(); ++i) {
      const Json* a = Resolve(alts[i]);
      if (a == nullptr || !a->is_object() ||
          !(Member(*a, "type") || Member(*a, "enum") || Member(*a, "const"))) {
        return Invalid(absl::StrCat(where, "[", i, "]"),
                       "oneOf alternatives must each state type, enum or const (so that no "
                       "value matches two of them)");
      }
    }
    // The union's node exists before its alternatives compile: recursion through this schema
    // finds it (and an alternative that is the union itself is left recursion).
    ASSIGN_OR_RETURN(int32_t u, NewNode(Node::Kind::kUnion, where));
    memo_[&s] = u;
    std::vector<int32_t> nodes;
    for (size_t i = 0; i < alts.size(); ++i) {
      ASSIGN_OR_RETURN(int32_t n, Compile(alts[i], absl::StrCat(where, "[", i, "]")));
      nodes.push_back(n);
    }
    if (const Json* nullable = Member(s, "nullable");
        nullable && nullable->is_boolean() && nullable->get<bool>()) {
      ASSIGN_OR_RETURN(int32_t null, Literals({"null"}, where));
      nodes.push_back(null);
    }
    RETURN_IF_ERROR(Union(nodes, where, u, exclusive));
    return u;
  }

  // A schema with its local $refs followed (a few hops), or null.
  const Json* Resolve(const Json& s) const {
    const Json* at = &s;
    for (int hop = 0; hop < 16 && at->is_object(); ++hop) {
      const Json* ref = Member(*at, "$ref");
      if (ref == nullptr || !ref->is_string()) return at;
      at = Target(ref->get<std::string>());
      if (at == nullptr) return nullptr;
    }
    return at;
  }

  // Makes node `into` (a kUnion) accept any of `nodes`, dispatching on the first byte.
  // `exclusive` (oneOf): no value may belong to two of them.
  absl::Status Union(const std::vector<int32_t>& nodes, const std::string& where, int32_t into,
                     bool exclusive = false) {
    // Literal sets merge into one; a number takes an integer's place.
    std::vector<int32_t> parts;
    std::vector<std::string> literals;
    bool has_number = false, has_integer = false;
    for (int32_t n : nodes) {
      has_number |= g_.nodes[n].kind == Node::Kind::kNumber && !g_.nodes[n].integer;
      has_integer |= g_.nodes[n].kind == Node::Kind::kNumber && g_.nodes[n].integer;
    }
    if (exclusive && has_number && has_integer) {
      return Invalid(where, "an integer alternative beside a number one matches both");
    }
    // Each distinct node once: alternatives that $ref one definition are one node (4,000 refs
    // to a 50,000-member enum copied its members 4,000 times, 6 GB), and the merged texts stop at
    // the literal budget, not after.
    absl::flat_hash_set<int32_t> seen;
    absl::flat_hash_set<absl::string_view> distinct;  // the merged node's texts, counted once
    size_t literal_bytes = literal_bytes_;
    for (int32_t n : nodes) {
      const Node& node = g_.nodes[n];
      if (!seen.insert(n).second) {
        if (exclusive) return Invalid(where, "two alternatives are the same schema");
        continue;
      }
      if (node.kind == Node::Kind::kLiterals && done_[n]) {
        const std::vector<std::string>& texts = g_.tries[node.literals].texts;
        for (const std::string& t : texts) {
          if (distinct.insert(t).second) literal_bytes += t.size();
        }
        if (literal_bytes > kMaxLiteralBytes) {
          return Invalid(where,
                         absl::StrCat("the schema's literals exceed ", kMaxLiteralBytes, " bytes"));
        }
        literals.insert(literals.end(), texts.begin(), texts.end());
      } else if (node.kind == Node::Kind::kNumber && node.integer && has_number) {
        // The number alternative writes this one's integers only when its bounds hold them all
        // (those within ±2^53: a bounded number writes no more, and the subset may leave the
        // rest out).
        const NumberUnits lo =
            std::max(NumberUnits{node.bounded ? node.min : -kMaxIntegerMagnitude} * kUnitsPerOne,
                     -kMaxExactNumberUnits);
        const NumberUnits hi =
            std::min(NumberUnits{node.bounded ? node.max : kMaxIntegerMagnitude} * kUnitsPerOne,
                     kMaxExactNumberUnits);
        const bool covered = std::any_of(nodes.begin(), nodes.end(), [&](int32_t m) {
          const Node& num = g_.nodes[m];
          return num.kind == Node::Kind::kNumber && !num.integer &&
                 (!num.bounded || (num.min_units <= lo && hi <= num.max_units));
        });
        if (!covered) {
          return Invalid(where,
                         "an integer alternative beside a number one whose bounds leave some of "
                         "its integers out (both start with a digit)");
        }
      } else {
        parts.push_back(n);
      }
    }
    if (!literals.empty()) {
      std::sort(literals.begin(), literals.end());
      if (exclusive) {
        auto twice = std::adjacent_find(literals.begin(), literals.end());
        if (twice != literals.end()) {
          return Invalid(where, absl::StrCat("two alternatives both admit ", twice->substr(0, 64)));
        }
      }
      literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
      ASSIGN_OR_RETURN(int32_t lit, Literals(literals, where));
      parts.push_back(lit);
    }
    for (int32_t p : parts) {
      if (!done_[p] && g_.nodes[p].kind == Node::Kind::kUnion) {
        // An alternative that is a union still being built (a recursive schema): its first
        // bytes are known once it is; Finish dispatches this one then.
        deferred_.push_back({into, parts, where});
        return absl::OkStatus();
      }
    }
    return Dispatch(parts, where, into);
  }

 public:
  // Unions deferred by Union, in as many rounds as it takes; what is left after that refers back
  // to itself without any input between (left recursion).
  absl::Status Finish() {
    for (bool progress = true; progress && !deferred_.empty();) {
      progress = false;
      for (size_t i = 0; i < deferred_.size();) {
        const Deferred& d = deferred_[i];
        const bool ready = std::all_of(d.parts.begin(), d.parts.end(), [&](int32_t p) {
          return done_[p] || g_.nodes[p].kind != Node::Kind::kUnion;
        });
        if (!ready) {
          ++i;
          continue;
        }
        RETURN_IF_ERROR(Dispatch(d.parts, d.where, d.into));
        deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
        progress = true;
      }
    }
    if (!deferred_.empty()) {
      return Invalid(deferred_[0].where,
                     "an alternative refers back to this schema before any input (left "
                     "recursion)");
    }
    return absl::OkStatus();
  }

 private:
  // The dispatch table of union `into` over `parts` (each done): overlapping first bytes are
  // refused.
  absl::Status Dispatch(const std::vector<int32_t>& parts, const std::string& where, int32_t into) {
    std::vector<int32_t> dispatch(256, -1);
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::vector<bool> first = FirstBytes(g_, parts[i]);
      for (int b = 0; b < 256; ++b) {
        if (!first[b]) continue;
        if (dispatch[b] >= 0 && dispatch[b] != parts[i]) {
          return Invalid(where, absl::StrCat("two alternatives can both start with ",
                                             Printable(static_cast<uint8_t>(b)),
                                             "; only alternatives of different JSON types (or "
                                             "enums) are supported"));
        }
        dispatch[b] = parts[i];
      }
    }
    g_.nodes[into].dispatch = std::move(dispatch);
    done_[into] = true;
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<int64_t>> Count(const Json& s, const char* key,
                                               const std::string& path) {
    const Json* v = Member(s, key);
    if (v == nullptr) return std::nullopt;
    // JSON Schema's integers are numbers without a fraction: 2.0 and 1e2 count as 2 and 100.
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (d >= 0 && d <= 9007199254740992.0 && d == std::floor(d)) return static_cast<int64_t>(d);
    }
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return Invalid(absl::StrCat(path, ".", key), "expected a non-negative integer");
    }
    return v->get<int64_t>();
  }

  absl::StatusOr<std::vector<std::string>> Types(const Json& s, const std::string& path) {
    static const std::set<std::string> kTypes = {"string", "integer", "number", "boolean",
                                                 "null",   "object",  "array"};
    std::vector<std::string> types;
    const Json* t = Member(s, "type");
    const std::string where = absl::StrCat(path, ".type");
    if (t != nullptr) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const Json& e : *t) {
          if (!e.is_string()) return Invalid(where, "expected a string or a list of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        return Invalid(where, "expected a string or a non-empty list of strings");
      }
      for (const std::string& type : types) {
        if (!kTypes.count(type)) {
          return Invalid(where, absl::StrCat("unknown type '", type.substr(0, 32), "'"));
        }
      }
    }
    if (const Json* nullable = Member(s, "nullable");
        nullable && nullable->is_boolean() && nullable->get<bool>() && !types.empty()) {
      types.push_back("null");
    }
    return types;
  }

  absl::StatusOr<int32_t> CompileShape(const Json& s, const std::string& path) {
    ASSIGN_OR_RETURN(std::vector<std::string> types, Types(s, path));
    // enum / const: the listed values (of the listed types, when there are types).
    const Json* e = Member(s, "enum");
    const Json* c = Member(s, "const");
    if (e != nullptr || c != nullptr) {
      if (e != nullptr && (!e->is_array() || e->empty())) {
        return Invalid(absl::StrCat(path, ".enum"), "expected a non-empty array");
      }
      for (const auto& [key, value] : s.items()) {  // their values are not checked against these
        if (Shape().count(key) && key != "type" && key != "enum" && key != "const") {
          return Invalid(absl::StrCat(path, ".", key),
                         absl::StrCat("not supported beside ", e ? "enum" : "const"));
        }
      }
      std::vector<std::string> texts;
      auto add = [&](const Json& v) {
        if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) {
              return TypeMatches(v, t);
            })) {
          return;
        }
        if (e != nullptr && c != nullptr && std::find(e->begin(), e->end(), v) == e->end()) return;
        texts.push_back(v.dump(-1, ' ', false, Json::error_handler_t::replace));
      };
      if (c != nullptr) {
        add(*c);
      } else {
        for (const Json& v : *e) add(v);
      }
      if (texts.empty()) return Invalid(path, "enum/const admit no value of the given type");
      std::sort(texts.begin(), texts.end());
      texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
      absl::StatusOr<int32_t> n = Literals(texts, absl::StrCat(path, e ? ".enum" : ".const"));
      if (n.ok()) memo_[&s] = *n;
      return n;
    }
    if (types.empty()) {  // inferred from the keywords, else any value
      if (Member(s, "properties") || Member(s, "required") || Member(s, "additionalProperties")) {
        types.push_back("object");
      } else if (Member(s, "items") || Member(s, "minItems") || Member(s, "maxItems")) {
        types.push_back("array");
      } else if (Member(s, "minLength") || Member(s, "maxLength") || Member(s, "pattern") ||
                 SchemaRegexes::KnownFormat(s)) {
        types.push_back("string");
      } else if (FirstBound(s)) {
        types.push_back("number");
      } else {
        ASSIGN_OR_RETURN(int32_t any, Any());
        memo_[&s] = any;
        return any;
      }
    }
    if (types.size() > 1) {
      // A numeric type whose bounds leave nothing admits no value: the others may.
      if (FirstBound(s) && CheckBounds(s, path).ok()) {
        std::vector<std::string> kept;
        for (const std::string& t : types) {
          const bool empty = (t == "integer" && !IntegerBounds(s, path).ok()) ||
                             (t == "number" && !NumberBounds(s, path).ok());
          if (!empty) kept.push_back(t);
        }
        if (!kept.empty()) types = std::move(kept);
      }
      // Then a number writes every integer the integer type would (the same bounds; those
      // within ±2^53), and the integer type goes.
      if (std::count(types.begin(), types.end(), "number") > 0) {
        types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
      }
    }
    if (types.size() > 1) {
      const std::string where = absl::StrCat(path, ".type");
      ASSIGN_OR_RETURN(int32_t u, NewNode(Node::Kind::kUnion, where));
      memo_[&s] = u;
      std::vector<int32_t> nodes;
      for (const std::string& t : types) {
        ASSIGN_OR_RETURN(int32_t n, CompileType(s, t, path, /*memo=*/false));
        nodes.push_back(n);
      }
      RETURN_IF_ERROR(Union(nodes, where, u));
      return u;
    }
    return CompileType(s, types[0], path, /*memo=*/true);
  }

  absl::StatusOr<int32_t> CompileType(const Json& s, const std::string& type,
                                      const std::string& path, bool memo) {
    ASSIGN_OR_RETURN(int32_t n, CompileTypeNode(s, type, path, memo));
    if (memo) memo_[&s] = n;  // one node per schema, however many refs reach it
    return n;
  }

  absl::StatusOr<int32_t> CompileTypeNode(const Json& s, const std::string& type,
                                          const std::string& path, bool memo) {
    if (type == "null") return Literals({"null"}, path);
    if (type == "boolean") return Literals({"false", "true"}, path);
    if (type == "integer" || type == "number") {
      ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kNumber, path));
      Node& node = g_.nodes[n];
      node.integer = type == "integer";
      if (FirstBound(s) && node.integer) {
        ASSIGN_OR_RETURN(std::tie(node.min, node.max), IntegerBounds(s, path));
        node.bounded = true;
      } else if (FirstBound(s)) {
        ASSIGN_OR_RETURN(std::tie(node.min_units, node.max_units), NumberBounds(s, path));
        node.bounded = true;
      }
      done_[n] = true;
      return n;
    }
    if (type == "string") {
      ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kString, path));
      ASSIGN_OR_RETURN(std::optional<int64_t> lo, Count(s, "minLength", path));
      ASSIGN_OR_RETURN(std::optional<int64_t> hi, Count(s, "maxLength", path));
      if (lo && hi && *lo > *hi) return Invalid(path, "minLength is above maxLength");
      if (lo) g_.nodes[n].min = *lo;
      if (hi) g_.nodes[n].max = *hi;
      RETURN_IF_ERROR(regexes_.Apply(s, path, g_, n));
      done_[n] = true;
      return n;
    }
    if (type == "array") {
      ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kArray, path));
      if (memo) memo_[&s] = n;
      ASSIGN_OR_RETURN(std::optional<int64_t> lo, Count(s, "minItems", path));
      ASSIGN_OR_RETURN(std::optional<int64_t> hi, Count(s, "maxItems", path));
      const Json* items = Member(s, "items");
      if (items != nullptr && items->is_array()) {
        return Invalid(absl::StrCat(path, ".items"), "a list of schemas (tuple) is not supported");
      }
      if (items != nullptr && items->is_boolean() && !items->get<bool>()) hi = 0;
      if (lo && hi && *lo > *hi) return Invalid(path, "minItems is above maxItems");
      int32_t item = -1;
      if (items == nullptr || (items->is_boolean() && !items->get<bool>())) {
        ASSIGN_OR_RETURN(item, Any());
      } else {
        ASSIGN_OR_RETURN(item, Compile(*items, absl::StrCat(path, ".items")));
      }
      Node& node = g_.nodes[n];
      node.value = item;
      if (lo) node.min = *lo;
      if (hi) node.max = *hi;
      done_[n] = true;
      return n;
    }
    // object
    const Json* props = Member(s, "properties");
    const Json* extra = Member(s, "additionalProperties");
    if (props != nullptr && !props->is_object()) {
      return Invalid(absl::StrCat(path, ".properties"), "expected an object");
    }
    if (extra != nullptr && !extra->is_boolean() && !extra->is_object()) {
      return Invalid(absl::StrCat(path, ".additionalProperties"), "expected a boolean or a schema");
    }
    std::vector<std::string> required;
    if (const Json* req = Member(s, "required")) {
      if (!req->is_array()) return Invalid(absl::StrCat(path, ".required"), "expected an array");
      for (const Json& r : *req) {
        if (!r.is_string()) {
          return Invalid(absl::StrCat(path, ".required"), "expected a list of strings");
        }
        required.push_back(r.get<std::string>());
      }
    }
    if (props == nullptr && (extra == nullptr || !extra->is_boolean() || extra->get<bool>())) {
      if (!required.empty()) {
        return Invalid(absl::StrCat(path, ".required"),
                       "required keys need their schemas in properties");
      }
      ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kMap, path));
      if (memo) memo_[&s] = n;
      int32_t value = -1;
      if (extra == nullptr || extra->is_boolean()) {
        ASSIGN_OR_RETURN(value, Any());
      } else {
        ASSIGN_OR_RETURN(value, Compile(*extra, absl::StrCat(path, ".additionalProperties")));
      }
      g_.nodes[n].value = value;
      done_[n] = true;
      return n;
    }
    ASSIGN_OR_RETURN(int32_t n, NewNode(Node::Kind::kObject, path));
    if (memo) memo_[&s] = n;
    std::vector<std::string> keys;
    std::vector<int32_t> values;
    std::vector<bool> is_required;
    const std::set<std::string> wanted(required.begin(), required.end());
    std::set<std::string> names;
    if (props != nullptr) {
      for (const auto& [name, schema] : props->items()) {
        ASSIGN_OR_RETURN(int32_t v,
                         Compile(schema, absl::StrCat(path, ".properties.", name.substr(0, 64))));
        keys.push_back(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
        literal_bytes_ += keys.back().size();
        if (literal_bytes_ > kMaxLiteralBytes) {
          return Invalid(path, absl::StrCat("the schema's keys and literals exceed ",
                                            kMaxLiteralBytes, " bytes"));
        }
        values.push_back(v);
        is_required.push_back(wanted.count(name) > 0);
        names.insert(name);
      }
    }
    for (const std::string& r : wanted) {
      if (!names.count(r)) {
        return Invalid(absl::StrCat(path, ".required"),
                       absl::StrCat("'", r.substr(0, 64), "' is not in properties"));
      }
    }
    LiteralTrie trie;
    for (size_t i = 0; i < keys.size(); ++i) trie.Add(keys[i], static_cast<int32_t>(i));
    Node& node = g_.nodes[n];
    node.literals = static_cast<int32_t>(g_.tries.size());
    g_.tries.push_back(std::move(trie));
    node.properties = std::move(values);
    node.required = std::move(is_required);
    node.next_required.assign(node.properties.size() + 1, 0);
    int32_t next = static_cast<int32_t>(node.properties.size());
    for (int32_t j = next; j-- > 0;) {  // next_required[i]: the first required key at or after i
      if (node.required[j]) next = j;
      node.next_required[j] = next;
    }
    node.next_required.back() = static_cast<int32_t>(node.properties.size());
    done_[n] = true;
    return n;
  }

  const Json& root_;
  Grammar g_;
  std::vector<bool> done_;  // per node: fully built (its kind, dispatch or trie final)
  std::map<const Json*, int32_t> memo_;
  std::set<const Json*> resolving_;
  size_t literal_bytes_ = 0;
  SchemaRegexes regexes_;
  int depth_ = 0;  // Compile calls in progress
  struct Deferred {
    int32_t into;
    std::vector<int32_t> parts;
    std::string where;
  };
  std::vector<Deferred> deferred_;
};

// A schema compiled anew (CompileJsonSchema shares what is already live).
absl::StatusOr<std::shared_ptr<const Grammar>> CompileNew(const nlohmann::ordered_json& schema,
                                                          absl::string_view where,
                                                          const RegexBudget& budget) {
  Compiler c(schema, budget);
  absl::StatusOr<int32_t> root = c.Compile(schema, std::string(where));
  if (!root.ok()) return root.status();
  RETURN_IF_ERROR(c.Finish());
  auto g = std::make_shared<Grammar>(std::move(c.grammar()));
  g->root = *root;
  ComputeMinDepths(*g);
  if (g->nodes[g->root].min_depth > kMaxNesting) {
    return Invalid(where,
                   absl::StrCat("every document of this schema nests objects and arrays "
                                "deeper than ",
                                kMaxNesting, " levels, or never ends (a required recursion)"));
  }
  return g;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    const nlohmann::ordered_json& schema, absl::string_view where, const RegexBudget& budget) {
  static LiveGrammars* const live = new LiveGrammars;
  // As given: key order is the output's order.
  return live->GetOrCompile(schema.dump(), [&]() -> LiveGrammars::Compiled {
    ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> compiled, CompileNew(schema, where, budget));
    return CountLive(std::move(compiled), where);
  });
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchemaText(absl::string_view text,
                                                                     absl::string_view where) {
  // Before the parser recurses (or scans its keys quadratically).
  if (const std::string why = JsonTooCostly(text, kMaxSchemaTextDepth); !why.empty()) {
    return Invalid(where, why);
  }
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return Invalid(where, "not valid JSON");
  return CompileJsonSchema(schema, where);
}

// A map of any values: what {"type": "object"} compiles to.
std::shared_ptr<const Grammar> JsonObjectGrammar() {
  static const std::shared_ptr<const Grammar> grammar =
      *CompileNew(nlohmann::ordered_json{{"type", "object"}}, "json_object", {});  // not counted
  return grammar;
}

}  // namespace linfer::structured
