// response_format / structured_outputs / guided_json parsing and the shared token index.
#include "server/openai/structured_output.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/request_builder.h"

namespace linfer::openai {
namespace {

using GrammarPtr = std::shared_ptr<const structured::Grammar>;

// A schema given as an object, or (vLLM accepts both) as JSON text.
absl::StatusOr<GrammarPtr> SchemaGrammar(const Json& schema, const std::string& field) {
  if (schema.is_string())
    return structured::CompileJsonSchemaText(schema.get<std::string>(), field);
  if (!schema.is_object() && !schema.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a JSON Schema object, got ", TypeName(schema)));
  }
  return structured::CompileJsonSchema(schema, field);
}

// vLLM's choice: a list of strings, the output exactly one of them.
absl::StatusOr<GrammarPtr> Choices(const Json& list, const std::string& field) {
  if (!list.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a list of strings, got ", TypeName(list)));
  }
  std::vector<std::string> choices;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: expected a string, got ", TypeName(list[i])));
    }
    choices.push_back(list[i].get<std::string>());
  }
  return structured::ChoiceGrammar(choices, field);
}

// vLLM's regex: a string, the output the whole of which it matches (Python's syntax).
absl::StatusOr<GrammarPtr> Regex(const Json& pattern, const std::string& field) {
  if (!pattern.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a string, got ", TypeName(pattern)));
  }
  return structured::RegexGrammar(pattern.get<std::string>(), field);
}

// `field` ({"type", ...}): the type's grammar. json_schema's members ("name", "schema", ...) are
// in a nested "json_schema" object (response_format) or beside "type" (text.format).
absl::StatusOr<GrammarPtr> FormatGrammar(const Json& format, const std::string& field,
                                         bool nested_schema) {
  Fields f(format, field + ".");
  ASSIGN_OR_RETURN(std::optional<std::string> type, f.String("type"));
  if (!type) return absl::InvalidArgumentError(absl::StrCat(field, ".type: missing"));
  if (*type == "text") return GrammarPtr();
  if (*type == "json_object") return structured::JsonObjectGrammar();
  if (*type != "json_schema") {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".type: ", Quote(*type),
                     " is not supported; use \"text\", \"json_object\" or \"json_schema\""));
  }
  const Json* holder = &format;
  std::string where = field;
  if (nested_schema) {
    ASSIGN_OR_RETURN(holder, f.Object("json_schema"));
    where = field + ".json_schema";
    if (holder == nullptr) return absl::InvalidArgumentError(where + ": missing");
  }
  Fields s(*holder, where + ".");
  ASSIGN_OR_RETURN(std::optional<std::string> name, s.String("name"));
  ASSIGN_OR_RETURN(std::optional<bool> strict, s.Bool("strict"));
  (void)name;    // OpenAI requires it; it names the format, nothing else
  (void)strict;  // the output always follows the schema (strict or not)
  const Json* schema = s.Get("schema");
  if (schema == nullptr) return absl::InvalidArgumentError(where + ".schema: missing");
  return SchemaGrammar(*schema, where + ".schema");
}

}  // namespace

absl::StatusOr<GrammarPtr> ParseOutputFormat(const Json& body) {
  Fields f(body);
  std::vector<std::pair<std::string, GrammarPtr>> asked;
  ASSIGN_OR_RETURN(const Json* format, f.Object("response_format"));
  if (format != nullptr) {
    ASSIGN_OR_RETURN(GrammarPtr g, FormatGrammar(*format, "response_format", true));
    if (g) asked.emplace_back("response_format", std::move(g));
  }
  ASSIGN_OR_RETURN(const Json* outputs, f.Object("structured_outputs"));
  bool compact = false;  // structured_outputs.disable_any_whitespace
  if (outputs != nullptr) {
    Fields o(*outputs, "structured_outputs.");
    for (const char* key : {"grammar", "structural_tag"}) {
      if (o.Get(key) != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("structured_outputs.", key,
                         ": not supported (json, json_object, choice and regex are)"));
      }
    }
    if (const Json* regex = o.Get("regex")) {
      ASSIGN_OR_RETURN(GrammarPtr g, Regex(*regex, "structured_outputs.regex"));
      asked.emplace_back("structured_outputs.regex", std::move(g));
    }
    if (const Json* choice = o.Get("choice")) {
      ASSIGN_OR_RETURN(GrammarPtr g, Choices(*choice, "structured_outputs.choice"));
      asked.emplace_back("structured_outputs.choice", std::move(g));
    }
    if (const Json* schema = o.Get("json")) {
      ASSIGN_OR_RETURN(GrammarPtr g, SchemaGrammar(*schema, "structured_outputs.json"));
      asked.emplace_back("structured_outputs.json", std::move(g));
    }
    ASSIGN_OR_RETURN(std::optional<bool> object, o.Bool("json_object"));
    if (object.value_or(false)) {
      asked.emplace_back("structured_outputs.json_object", structured::JsonObjectGrammar());
    }
    ASSIGN_OR_RETURN(std::optional<bool> no_whitespace, o.Bool("disable_any_whitespace"));
    compact = no_whitespace.value_or(false);
  }
  // vLLM's older top-level spellings of what is not supported: refused, never ignored.
  // (guided_decoding_backend names vLLM's grammar engine: ignored, there is one here.)
  if (f.Get("guided_grammar") != nullptr) {
    return absl::InvalidArgumentError(
        "guided_grammar: not supported (guided_json, guided_choice, guided_regex, "
        "response_format and structured_outputs.json / json_object / choice / regex are)");
  }
  if (const Json* regex = f.Get("guided_regex")) {
    ASSIGN_OR_RETURN(GrammarPtr g, Regex(*regex, "guided_regex"));
    asked.emplace_back("guided_regex", std::move(g));
  }
  if (const Json* choice = f.Get("guided_choice")) {
    ASSIGN_OR_RETURN(GrammarPtr g, Choices(*choice, "guided_choice"));
    asked.emplace_back("guided_choice", std::move(g));
  }
  if (const Json* guided = f.Get("guided_json")) {
    ASSIGN_OR_RETURN(GrammarPtr g, SchemaGrammar(*guided, "guided_json"));
    asked.emplace_back("guided_json", std::move(g));
  }
  if (compact && !asked.empty()) {  // also for response_format
    ASSIGN_OR_RETURN(asked.back().second,
                     structured::WithoutWhitespace(asked.back().second, asked.back().first));
  }
  if (asked.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(asked[1].first, ": give one output format (",
                                                   asked[0].first, " is given too)"));
  }
  return asked.empty() ? GrammarPtr() : asked[0].second;
}

absl::StatusOr<GrammarPtr> ParseTextFormat(const Json& format, const std::string& field) {
  if (!format.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected an object, got ", TypeName(format)));
  }
  return FormatGrammar(format, field, false);
}

}  // namespace linfer::openai
