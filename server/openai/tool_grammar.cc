// The forced-call grammar: one tagged node chooses the function by its opening text, each
// function's arguments follow, and an optional "\n" tag loops back for the next call. Qwen XML
// parameters are a chain of tagged nodes, one per position i: the tags of the parameters that
// may come next (i up to the first required one) and, once none is required, the closing text.
#include "server/openai/tool_grammar.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/structured/text_grammar.h"
#include "server/openai/tool_parser.h"

namespace linfer::openai {
namespace {

using structured::Grammar;
using structured::Node;

// Bounds on the XML chains' tags (up to (parameters + 1)² per function, summed) and on the bytes
// of every text in the grammar (the schemas' keys and literals, tags, enum members): a request's
// schema stays a small grammar. And on the functions a call may be forced among
// (OpenAI's limit on a request's tools) and the whole grammar's nodes.
constexpr size_t kMaxXmlTags = 1 << 16;
// The grammar's texts (tries), all tools together: the schemas' own bound (≈ 130 bytes of trie
// a byte).
constexpr size_t kMaxTextBytes = structured::kMaxLiteralBytes;
constexpr size_t kMaxForcedTools = 128;
constexpr size_t kMaxNodesAll = 4 * structured::kMaxNodes;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// A name the syntax writes as is and the parser reads back the same: no spaces or control bytes,
// quotes, backslashes, '=' or angle brackets.
bool PlainName(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  for (const char c : s) {
    const auto b = static_cast<uint8_t>(c);
    if (b <= 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '=') return false;
  }
  return true;
}

// What the grammar has taken so far of the bounds above.
struct Budget {
  size_t tags = 0;
  size_t text_bytes = 0;
};

size_t TextBytes(const Grammar& g) {
  size_t n = 0;
  for (const structured::LiteralTrie& t : g.tries) {
    for (const std::string& text : t.texts) n += text.size();
  }
  return n;
}

struct Tool {
  std::string name;
  Json parameters;
  std::string where;  // "tools[i]<parameters>"
};

// What follows "<parameter=P>\n" for a property (`prop`, compiled as node `compiled`), up to and
// with `next`, so that the parser (tool_parser.cc) reads back a value of the schema. A text-typed
// property (PropertyType string or none) is read as raw text: its compiled node must be a string
// (raw text within its length bounds) or string members (one of them, raw; "null" too where the
// schema admits null), else the reader could not give a value of the schema. Other types are
// JSON of the compiled schema, except where a string is among them (the reader would keep its
// quotes).
absl::StatusOr<int32_t> XmlValue(Grammar& g, const Json& prop, const Json& root, int32_t compiled,
                                 int32_t next, const std::string& where, Budget* budget) {
  const std::string type = PropertyType(prop, &root);
  const bool nullable = PropertyNullable(prop, &root);
  const Node node = g.nodes[static_cast<size_t>(compiled)];  // a copy: g.nodes grows below
  const int32_t string_branch = node.kind == Node::Kind::kUnion ? node.dispatch['"'] : compiled;
  if (!IsTextType(type)) {
    if (string_branch >= 0 && node.kind == Node::Kind::kUnion) {
      return Invalid(where, "a type list mixing strings with " + type +
                                " cannot be forced in this model's tool syntax");
    }
    return structured::AddSequence(g, {compiled, structured::AddText(g, "\n</parameter>\n"), next});
  }
  const Node* text = string_branch >= 0 ? &g.nodes[static_cast<size_t>(string_branch)] : nullptr;
  // The reader turns the word "null" into null where the property looks nullable to it: the
  // compiled schema must then admit null too.
  bool compiled_null = node.kind == Node::Kind::kUnion && node.dispatch['n'] >= 0;
  if (text != nullptr && text->kind == Node::Kind::kLiterals) {
    for (const std::string& literal : g.tries[static_cast<size_t>(text->literals)].texts) {
      compiled_null = compiled_null || literal == "null";
    }
  }
  if (nullable && !compiled_null) {
    return Invalid(where, "looks nullable to the tool-call reader but its schema admits no null");
  }
  if (text != nullptr && text->kind == Node::Kind::kString) {  // raw text; "</parameter>" ends it
    // A format stays an annotation in raw text (as before formats were enforced); a pattern
    // would go unenforced: refused.
    if (text->regex >= 0 && !text->regex_is_format) {
      return Invalid(where,
                     "a string with a pattern cannot be forced in this model's tool "
                     "syntax (its values are raw text up to </parameter>)");
    }
    const int64_t min = text->min, max = text->max;
    ASSIGN_OR_RETURN(const int32_t raw, structured::AddRawText(g, "</parameter>"));
    g.nodes[static_cast<size_t>(raw)].min = min;
    g.nodes[static_cast<size_t>(raw)].max = max;
    return structured::AddSequence(g, {raw, structured::AddText(g, "\n"), next});
  }
  if (text != nullptr && text->kind == Node::Kind::kLiterals) {  // members, raw
    std::vector<std::pair<std::string, int32_t>> choices;
    for (const std::string& literal : g.tries[static_cast<size_t>(text->literals)].texts) {
      const Json member = Json::parse(literal, nullptr, false);
      if (member.is_null()) continue;  // (below, with a union's null)
      if (!member.is_string()) {
        const bool any_string =
            std::any_of(g.tries[static_cast<size_t>(text->literals)].texts.begin(),
                        g.tries[static_cast<size_t>(text->literals)].texts.end(),
                        [](const std::string& l) { return !l.empty() && l[0] == '"'; });
        return Invalid(where, !any_string ? "an enum or const of values other than strings "
                                            "needs a \"type\" to be forced in this model's "
                                            "tool syntax"
                                          : "an enum mixing strings with other values cannot be "
                                            "forced in this model's tool syntax");
      }
      const std::string v = member.get<std::string>();
      budget->text_bytes += v.size() + 16;
      if (budget->text_bytes > kMaxTextBytes) {
        return Invalid(where, "the enums are too large to force a call in this syntax");
      }
      // (a nullable parameter's word "null" reads back as null, not as this member)
      if (absl::StrContains(v, "</parameter>") ||
          (nullable && absl::AsciiStrToLower(v) == "null")) {
        return Invalid(where, "an enum member this model's tool syntax cannot write (\"" +
                                  v.substr(0, 64) + "\")");
      }
      choices.emplace_back(absl::StrCat(v, "\n</parameter>\n"), next);
    }
    if (nullable) choices.emplace_back("null\n</parameter>\n", next);  // (compiled_null too)
    if (choices.empty()) return Invalid(where, "no value this model's tool syntax can write");
    return structured::AddTagged(g, choices, false, where);
  }
  return Invalid(where,
                 "read as text in this model's tool syntax (its \"type\" is string or missing), "
                 "but its schema is not a string: give the parameter a \"type\"");
}

// The tail of a Qwen XML call from parameter position 0 on: chains built back to front.
absl::StatusOr<int32_t> XmlParameters(Grammar& g, const Tool& t, int32_t params_root,
                                      int32_t after_call, Budget* budget) {
  const Node root = g.nodes[static_cast<size_t>(params_root)];  // a copy: g.nodes grows below
  std::vector<std::string> names;
  std::vector<bool> required;
  if (root.kind == Node::Kind::kObject) {
    for (size_t j = 0; j < root.properties.size(); ++j) {
      const Json key = Json::parse(g.tries[static_cast<size_t>(root.literals)].texts[j]);
      names.push_back(key.get<std::string>());
      required.push_back(root.required[j]);
    }
  } else if (root.kind != Node::Kind::kMap) {  // (a map: an object without properties; none here)
    return Invalid(t.where,
                   "forcing a call in this model's tool syntax (XML parameters) needs an "
                   "object schema");
  }
  const size_t n = names.size();
  const Json* props = t.parameters.contains("properties") ? &t.parameters["properties"] : nullptr;
  // value[j]: what follows "<parameter=P_j>\n", up to and with the next position's chain.
  std::vector<int32_t> at(n + 1, -1);
  {
    ASSIGN_OR_RETURN(at[n], structured::AddTagged(g, {{"</function>\n</tool_call>", after_call}},
                                                  false, t.where));
  }
  std::vector<int32_t> value(n, -1);
  for (size_t j = n; j-- > 0;) {
    const std::string where = absl::StrCat(t.where, ".properties.", names[j].substr(0, 64));
    if (!PlainName(names[j])) return Invalid(where, "a parameter name this syntax cannot write");
    if (props == nullptr || !props->is_object() || !props->contains(names[j])) {  // via $ref
      return Invalid(t.where,
                     "forcing a call in this model's tool syntax (XML parameters) needs "
                     "the properties at the schema's top (not through $ref)");
    }
    ASSIGN_OR_RETURN(value[j], XmlValue(g, (*props)[names[j]], t.parameters, root.properties[j],
                                        at[j + 1], where, budget));
    // Position j: parameters j.. up to the first required one; the close once none is left.
    // Bounded as they are listed (all positions together hold up to (n + 1)² tags).
    std::vector<std::pair<std::string, int32_t>> next;
    size_t k = j;
    for (; k < n; ++k) {
      budget->tags += 1;
      budget->text_bytes += names[k].size() + 16;
      if (budget->tags > kMaxXmlTags || budget->text_bytes > kMaxTextBytes) {
        return Invalid(t.where, "too many parameters to force a call");
      }
      next.emplace_back(absl::StrCat("<parameter=", names[k], ">\n"), value[k]);
      if (required[k]) break;
    }
    if (k == n) next.emplace_back("</function>\n</tool_call>", after_call);
    ASSIGN_OR_RETURN(at[j], structured::AddTagged(g, next, false, t.where));
  }
  return at[0];
}

absl::StatusOr<std::shared_ptr<const Grammar>> BuildToolCallGrammar(const Json& tools,
                                                                    ToolFormat format,
                                                                    const ForcedToolCall& forced) {
  if (format == ToolFormat::kNone) {
    return Invalid(forced.field,
                   "this model's chat template writes no tool calls, so none can be forced");
  }
  if (!tools.is_array() || tools.empty()) {
    return Invalid(forced.field, "forcing a tool call needs tools");
  }
  std::vector<Tool> chosen;
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const Json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Invalid(absl::StrCat("tools[", i, "]"), "expected a function with a name");
    }
    const std::string& name = (*fn)["name"].get_ref<const std::string&>();
    if (!names.insert(name).second) {
      return Invalid(absl::StrCat("tools[", i, "]"),
                     absl::StrCat("a second tool named \"", name.substr(0, 64), "\""));
    }
    if (!forced.name.empty() && name != forced.name) continue;
    if (chosen.size() == kMaxForcedTools) {
      return Invalid(forced.field, absl::StrCat("forcing a call among more than ", kMaxForcedTools,
                                                " tools is not supported"));
    }
    Tool t{name, fn->value("parameters", Json()),
           absl::StrCat("tools[", i, "]", forced.parameters)};
    if (!PlainName(t.name)) {
      return Invalid(absl::StrCat("tools[", i, "]"),
                     "forcing a call needs a tool name without spaces, quotes, backslashes, '<', "
                     "'>', '=' or control characters (1-256 bytes)");
    }
    if (t.parameters.is_null()) t.parameters = {{"type", "object"}, {"properties", Json::object()}};
    chosen.push_back(std::move(t));
  }
  if (chosen.empty()) {
    return Invalid(forced.field,
                   absl::StrCat("no tool named \"", forced.name.substr(0, 64), "\" in tools"));
  }
  auto g = std::make_shared<Grammar>();
  // Arguments as templates write them (tojson: ", " and ": "): one whitespace character at most
  // between tokens, so that a model cannot wander off in runs of spaces.
  g->max_whitespace_run = 1;
  // The reader cuts a call (Hermes) or a value (XML) at its closing tag, wherever it is: no "</"
  // in the arguments' strings ("<\/" says the same).
  g->no_close_tags = true;
  // The next call, or the end: an optional "\n" (its follower, the calls node, is set below).
  int32_t more = -1;
  if (forced.parallel) {
    ASSIGN_OR_RETURN(more, structured::AddTagged(*g, {{"\n", -1}}, true, forced.field));
  }
  std::vector<std::pair<std::string, int32_t>> calls;
  Budget budget;
  // One schema's budget for all the tools' patterns and formats.
  structured::RegexBudget regex_budget;
  regex_budget.what = "the tools' patterns";
  for (const Tool& t : chosen) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> args,
                     structured::CompileJsonSchema(t.parameters, t.where, regex_budget));
    // A live grammar compiled alone had a whole budget: what it took counts all the same.
    RETURN_IF_ERROR(structured::ChargeRegexBudget(*args, t.where, regex_budget));
    budget.text_bytes += TextBytes(*args);
    if (g->nodes.size() + args->nodes.size() > kMaxNodesAll || budget.text_bytes > kMaxTextBytes) {
      return Invalid(forced.field, "the tools' schemas are too large to force a call");
    }
    const int32_t root = structured::Graft(*g, *args);
    if (format == ToolFormat::kHermes) {
      const int32_t close = structured::AddText(*g, "}\n</tool_call>");
      calls.emplace_back(
          absl::StrCat("<tool_call>\n{\"name\": ", Json(t.name).dump(), ", \"arguments\": "),
          more < 0 ? structured::AddSequence(*g, {root, close})
                   : structured::AddSequence(*g, {root, close, more}));
    } else {
      ASSIGN_OR_RETURN(const int32_t params, XmlParameters(*g, t, root, more, &budget));
      calls.emplace_back(absl::StrCat("<tool_call>\n<function=", t.name, ">\n"), params);
    }
  }
  ASSIGN_OR_RETURN(g->root, structured::AddTagged(*g, calls, false, forced.field));
  if (more >= 0) g->nodes[static_cast<size_t>(more)].properties[0] = g->root;
  if (g->nodes.size() > kMaxNodesAll) {
    return Invalid(forced.field, "the tools' schemas are too large to force a call");
  }
  g->regex_work = structured::kMaxSchemaRegexWork - regex_budget.work;
  structured::ComputeMinDepths(*g);
  if (g->nodes[static_cast<size_t>(g->root)].min_depth > structured::kMaxNesting) {
    return Invalid(forced.field, "the tools' schemas admit no call that could end");
  }
  return g;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> ToolCallGrammar(const Json& tools, ToolFormat format,
                                                               const ForcedToolCall& forced) {
  // The same tools forced the same way by requests in flight share one grammar (an agent sends
  // its tools with every turn). `field` and `parameters` only name things in errors.
  static structured::LiveGrammars* const live = new structured::LiveGrammars;
  std::string key = absl::StrCat(static_cast<int>(format), forced.parallel ? "p" : "s",
                                 forced.name.size(), ":", forced.name, tools.dump());
  return live->GetOrCompile(key, [&]() -> structured::LiveGrammars::Compiled {
    ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> built,
                     BuildToolCallGrammar(tools, format, forced));
    return structured::CountLive(std::move(built), forced.field);
  });
}

}  // namespace linfer::openai
