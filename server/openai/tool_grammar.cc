// The forced-call grammar: one tagged node chooses the function by its opening text, each
// function's arguments follow, and an optional "\n" tag loops back for the next call. Qwen XML
// parameters are a chain of tagged nodes, one per position i: the tags of the parameters that
// may come next (i up to the first required one) and, once none is required, the closing text.
#include "server/openai/tool_grammar.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/structured/text_grammar.h"
#include "server/openai/tool_parser.h"

namespace linfer::openai {
namespace {

using structured::Grammar;
using structured::Node;

// Bound on the XML chains' tags ((parameters + 1)² per function, summed): a request's schema
// stays a small grammar.
constexpr size_t kMaxXmlTags = 1 << 16;

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

struct Tool {
  std::string name;
  Json parameters;
  std::string where;  // "tools[i]<parameters>"
};

// The tail of a Qwen XML call from parameter position 0 on: chains built back to front.
absl::StatusOr<int32_t> XmlParameters(Grammar& g, const Tool& t, int32_t params_root,
                                      int32_t after_call, size_t* tags) {
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
  *tags += (n + 1) * (n + 1);
  if (*tags > kMaxXmlTags) return Invalid(t.where, "too many parameters to force a call");
  const Json& props = t.parameters.value("properties", Json::object());
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
    const Json& prop = props.is_object() && props.contains(names[j]) ? props[names[j]] : Json();
    const Json* members = nullptr;
    if (prop.is_object() && prop.contains("enum")) members = &prop["enum"];
    const bool text = IsTextType(PropertyType(prop));
    bool string_members = members != nullptr && members->is_array() && !members->empty();
    if (string_members) {
      for (const Json& m : *members) string_members = string_members && m.is_string();
    }
    if (text && string_members) {  // one of the members, raw
      std::vector<std::pair<std::string, int32_t>> choices;
      for (const Json& m : *members) {
        const std::string v = m.get<std::string>();
        if (absl::StrContains(v, "</parameter>")) {
          return Invalid(where + ".enum", "a member holds \"</parameter>\"");
        }
        choices.emplace_back(absl::StrCat(v, "\n</parameter>\n"), at[j + 1]);
      }
      ASSIGN_OR_RETURN(value[j], structured::AddTagged(g, choices, false, where + ".enum"));
    } else if (text) {  // raw text; the parser strips one newline at each end
      const Node& schema = g.nodes[static_cast<size_t>(root.properties[j])];
      const int64_t min = schema.kind == Node::Kind::kString ? schema.min : 0;
      const int64_t max = schema.kind == Node::Kind::kString ? schema.max : INT64_MAX;
      ASSIGN_OR_RETURN(const int32_t raw, structured::AddRawText(g, "</parameter>"));
      g.nodes[static_cast<size_t>(raw)].min = min;  // (the string's length bounds)
      g.nodes[static_cast<size_t>(raw)].max = max;
      value[j] = structured::AddSequence(g, {raw, structured::AddText(g, "\n"), at[j + 1]});
    } else {  // JSON of the property's compiled schema
      value[j] = structured::AddSequence(
          g, {root.properties[j], structured::AddText(g, "\n</parameter>\n"), at[j + 1]});
    }
    // Position j: parameters j.. up to the first required one; the close once none is left.
    std::vector<std::pair<std::string, int32_t>> next;
    size_t k = j;
    for (; k < n; ++k) {
      next.emplace_back(absl::StrCat("<parameter=", names[k], ">\n"), value[k]);
      if (required[k]) break;
    }
    if (k == n) next.emplace_back("</function>\n</tool_call>", after_call);
    ASSIGN_OR_RETURN(at[j], structured::AddTagged(g, next, false, t.where));
  }
  return at[0];
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> ToolCallGrammar(const Json& tools, ToolFormat format,
                                                               const ForcedToolCall& forced) {
  if (format == ToolFormat::kNone) {
    return Invalid(forced.field,
                   "this model's chat template writes no tool calls, so none can be forced");
  }
  if (!tools.is_array() || tools.empty()) {
    return Invalid(forced.field, "forcing a tool call needs tools");
  }
  std::vector<Tool> chosen;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const Json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Invalid(absl::StrCat("tools[", i, "]"), "expected a function with a name");
    }
    Tool t{(*fn)["name"].get<std::string>(), fn->value("parameters", Json()),
           absl::StrCat("tools[", i, "]", forced.parameters)};
    for (const Tool& other : chosen) {
      if (other.name == t.name) {
        return Invalid(absl::StrCat("tools[", i, "]"),
                       absl::StrCat("a second tool named \"", t.name.substr(0, 64), "\""));
      }
    }
    if (!forced.name.empty() && t.name != forced.name) continue;
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
  // The next call, or the end: an optional "\n" (its follower, the calls node, is set below).
  int32_t more = -1;
  if (forced.parallel) {
    ASSIGN_OR_RETURN(more, structured::AddTagged(*g, {{"\n", -1}}, true, forced.field));
  }
  std::vector<std::pair<std::string, int32_t>> calls;
  size_t xml_tags = 0;
  for (const Tool& t : chosen) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> args,
                     structured::CompileJsonSchema(t.parameters, t.where));
    const int32_t root = structured::Graft(*g, *args);
    if (format == ToolFormat::kHermes) {
      const int32_t close = structured::AddText(*g, "}\n</tool_call>");
      calls.emplace_back(
          absl::StrCat("<tool_call>\n{\"name\": ", Json(t.name).dump(), ", \"arguments\": "),
          more < 0 ? structured::AddSequence(*g, {root, close})
                   : structured::AddSequence(*g, {root, close, more}));
    } else {
      ASSIGN_OR_RETURN(const int32_t params, XmlParameters(*g, t, root, more, &xml_tags));
      calls.emplace_back(absl::StrCat("<tool_call>\n<function=", t.name, ">\n"), params);
    }
  }
  ASSIGN_OR_RETURN(g->root, structured::AddTagged(*g, calls, false, forced.field));
  if (more >= 0) g->nodes[static_cast<size_t>(more)].properties[0] = g->root;
  if (g->nodes.size() > 4 * structured::kMaxNodes) {
    return Invalid(forced.field, "the tools' schemas are too large to force a call");
  }
  structured::ComputeMinDepths(*g);
  return g;
}

}  // namespace linfer::openai
