// Chat request parsing and template rendering.
#include "server/openai/chat_request.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/request_builder.h"

namespace linfer::openai {
namespace {

constexpr size_t kMaxMessages = 100000;

// Content as a template expects it: a string, null, or a list of text parts joined by "\n"
// (vLLM's "string" content format). Other part types are refused: the models are text-only.
absl::StatusOr<Json> NormalizeContent(const Json& content, const std::string& field) {
  if (content.is_null()) return content;
  ASSIGN_OR_RETURN(std::string text,
                   TextParts(content, field, {{"text", "text"}, {"refusal", "refusal"}}));
  return Json(std::move(text));
}

// Assistant tool calls: arguments given as JSON text become objects, as vLLM passes them.
absl::Status NormalizeToolCalls(Json& message, const std::string& field) {
  auto it = message.find("tool_calls");
  if (it == message.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".tool_calls: expected an array"));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    Json& call = (*it)[i];
    const std::string where = absl::StrCat(field, ".tool_calls[", i, "]");
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected {\"function\": {...}}"));
    }
    Json& args = call["function"]["arguments"];
    if (!args.is_null() && !args.is_string() && !args.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".function.arguments: expected a string of JSON (or an object), got ",
                       TypeName(args)));
    }
    if (args.is_string()) {  // "" is a call without arguments: {}
      const std::string& text = args.get_ref<const std::string&>();
      Json parsed = absl::StripAsciiWhitespace(text).empty() ? Json::object() : ParseJsonText(text);
      if (parsed.is_object()) args = std::move(parsed);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> NormalizeMessage(const Json& in, size_t i) {
  const std::string field = absl::StrCat("messages[", i, "]");
  if (!in.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected an object, got ", TypeName(in)));
  }
  Json m = in;
  Fields f(in, field + ".");
  ASSIGN_OR_RETURN(std::optional<std::string> role, f.String("role"));
  if (!role) return absl::InvalidArgumentError(absl::StrCat(field, ".role: missing"));
  if (*role == "developer") role = "system";
  if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool") {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".role: ", Quote(*role),
        " is not one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\""));
  }
  m["role"] = *role;
  if (auto c = m.find("content"); c != m.end()) {
    ASSIGN_OR_RETURN(*c, NormalizeContent(*c, field + ".content"));
  } else {
    m["content"] = nullptr;
  }
  if (*role == "assistant") {
    RETURN_IF_ERROR(NormalizeToolCalls(m, field));
    if (m.contains("reasoning") && !m.contains("reasoning_content")) {
      m["reasoning_content"] = m["reasoning"];
    }
  }
  return m;
}

absl::Status ParseTools(const Json& body, ChatRequest& r) {
  Fields f(body);
  ASSIGN_OR_RETURN(const Json* tools, f.Array("tools"));
  if (tools != nullptr) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
      if (fn == nullptr || !fn->is_object() || !fn->value("name", Json()).is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tools[", i, "]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}"));
      }
      // A JSON Schema object (the templates render it, and forced calls compile it).
      if (const Json params = fn->value("parameters", Json());
          !params.is_null() && !params.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tools[", i, "].function.parameters: expected a JSON Schema object, got ",
                         TypeName(params)));
      }
    }
    if (!tools->empty()) r.tools = *tools;
  }
  std::string choice = "auto";
  if (const Json* c = f.Get("tool_choice"); c != nullptr) {
    if (c->is_string()) {
      choice = c->get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required") {
        return absl::InvalidArgumentError(absl::StrCat(
            "tool_choice: \"", choice.substr(0, 64),
            "\" is not one of \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}"));
      }
    } else if (c->is_object()) {  // {"type": "function", "function": {"name": "f"}}
      Fields cf(*c, "tool_choice.");
      ASSIGN_OR_RETURN(const std::string type, cf.RequiredString("type"));
      if (type != "function") {
        return absl::InvalidArgumentError(absl::StrCat("tool_choice.type: \"", type.substr(0, 64),
                                                       "\" is not supported (only \"function\")"));
      }
      ASSIGN_OR_RETURN(const Json* fn, cf.Object("function"));
      if (fn == nullptr) return absl::InvalidArgumentError("tool_choice.function: missing");
      ASSIGN_OR_RETURN(const std::string name,
                       Fields(*fn, "tool_choice.function.").RequiredString("name"));
      choice = "named";
      r.forced = ForcedToolCall{name, true, "tool_choice.function.name", ".function.parameters"};
    } else {
      return absl::InvalidArgumentError("tool_choice: expected a string or an object");
    }
  }
  if (choice == "required") {
    r.forced = ForcedToolCall{"", true, "tool_choice", ".function.parameters"};
  }
  if (r.forced && r.tools.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.forced->field, ": forcing a tool call needs tools"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> parallel, f.Bool("parallel_tool_calls"));
  // A named function is called once (OpenAI's "forced function"); "required" makes one or more.
  if (r.forced) r.forced->parallel = r.forced->name.empty() && parallel.value_or(true);
  r.parallel_tool_calls = parallel.value_or(true);
  r.parse_tools = !r.tools.is_null() && choice != "none";
  return absl::OkStatus();
}

}  // namespace

std::string MessageField(const ChatRequest& r, size_t i) {
  return i < r.message_fields.size() ? r.message_fields[i] : absl::StrCat("messages[", i, "]");
}

absl::StatusOr<ChatRequest> ParseChatRequest(const Json& body) {
  ChatRequest r;
  Fields f(body);
  ASSIGN_OR_RETURN(const Json* messages, f.Array("messages"));
  if (messages == nullptr || messages->empty()) {
    return absl::InvalidArgumentError("messages: give at least one message");
  }
  if (messages->size() > kMaxMessages) {
    return absl::InvalidArgumentError(absl::StrCat("messages: more than ", kMaxMessages));
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    ASSIGN_OR_RETURN(Json m, NormalizeMessage((*messages)[i], i));
    r.messages.push_back(std::move(m));
  }
  RETURN_IF_ERROR(ParseTools(body, r));
  ASSIGN_OR_RETURN(const Json* kwargs, f.Object("chat_template_kwargs"));
  if (kwargs != nullptr) r.kwargs = *kwargs;
  ASSIGN_OR_RETURN(const Json* documents, f.Array("documents"));
  if (documents != nullptr) {
    for (size_t i = 0; i < documents->size(); ++i) {
      if (!(*documents)[i].is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "documents[", i, "]: expected an object, got ", TypeName((*documents)[i])));
      }
    }
    r.documents = *documents;
  }
  // vLLM refuses a request's own template unless told to trust them; this server uses its own.
  if (const Json* t = f.Get("chat_template"); t != nullptr && !t->is_null()) {
    return absl::InvalidArgumentError(
        "chat_template: a request's own chat template is not accepted; the server's (its "
        "model's, or --chat_template) renders every request");
  }
  ASSIGN_OR_RETURN(std::optional<bool> echo, f.Bool("echo"));
  if (echo.value_or(false)) {
    return absl::InvalidArgumentError("echo: not supported in chat completions");
  }
  ASSIGN_OR_RETURN(std::optional<bool> gen, f.Bool("add_generation_prompt"));
  ASSIGN_OR_RETURN(std::optional<bool> cont, f.Bool("continue_final_message"));
  r.continue_final_message = cont.value_or(false);
  if (r.continue_final_message && gen.value_or(false)) {
    return absl::InvalidArgumentError(
        "continue_final_message: cannot be true with add_generation_prompt true (one continues "
        "the final message, the other starts a new assistant message)");
  }
  r.add_generation_prompt = gen.value_or(true) && !r.continue_final_message;
  ASSIGN_OR_RETURN(std::optional<std::string> effort, f.String("reasoning_effort"));
  if (effort) RETURN_IF_ERROR(ApplyReasoningEffort(*effort, "reasoning_effort", r.kwargs));
  return r;
}

absl::Status ApplyReasoningEffort(const std::string& effort, const std::string& field,
                                  Json& kwargs) {
  static const char* const kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
  if (std::find(std::begin(kEfforts), std::end(kEfforts), effort) == std::end(kEfforts)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", Quote(effort), " is not one of none, minimal, low, medium, high, xhigh"));
  }
  if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = effort;
  if (effort == "none" && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = false;
  return absl::OkStatus();
}

absl::StatusOr<std::string> CutAfterFinalMessage(const std::string& text, const Json& messages,
                                                 const std::string& field_name) {
  const Json& last = messages.back();
  const std::string field =
      field_name.empty() ? absl::StrCat("messages[", messages.size() - 1, "]") : field_name;
  const Json content = last.value("content", Json());
  const absl::string_view open =
      content.is_string() ? absl::StripAsciiWhitespace(content.get_ref<const std::string&>())
                          : absl::string_view();
  const Json calls = last.value("tool_calls", Json());
  if (!calls.is_null() && !calls.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the final message is continued, so it must end with text, not tool calls"));
  }
  if (open.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the final message is continued, so it must have text"));
  }
  const size_t at = text.rfind(std::string(open));
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": the chat template does not write the final message's text as given, so "
                     "the reply cannot continue it"));
  }
  return text.substr(0, at + open.size());
}

namespace {

// The first assistant tool call whose arguments are not a JSON object (text that is not one, or
// none): kept as they are, as a model does not always write valid JSON, but most templates read
// them as a mapping — said with a template's refusal. Empty when there is none.
std::string ArgumentsHint(const Json& messages) {
  if (!messages.is_array()) return "";
  for (size_t i = 0; i < messages.size(); ++i) {
    auto calls = messages[i].find("tool_calls");
    if (calls == messages[i].end() || !calls->is_array()) continue;
    for (size_t j = 0; j < calls->size(); ++j) {
      const Json& call = (*calls)[j];
      if (!call.is_object() || !call.contains("function")) continue;
      const Json& fn = call["function"];
      if (!fn.is_object() || (fn.contains("arguments") && fn["arguments"].is_object())) continue;
      return absl::StrCat(" (messages[", i, "].tool_calls[", j,
                          "].function.arguments is not a JSON object, which the template may "
                          "need)");
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> RenderChat(const ChatSetup& setup, const ChatRequest& request,
                                       const Json& messages, bool add_generation_prompt) {
  if (!setup.chat_template) {
    return absl::InvalidArgumentError(
        "messages: this model has no chat template (serve it with --chat_template FILE), use "
        "/v1/completions instead");
  }
  absl::StatusOr<Json> vars =
      tokenizer::ChatTemplateVars(messages, request.tools, add_generation_prompt,
                                  setup.special_tokens, request.kwargs, request.documents);
  if (!vars.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat_template_kwargs: ", vars.status().message()));
  }
  absl::StatusOr<std::string> text = setup.chat_template->Render(*vars);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages: the chat template refused them: ", text.status().message(),
                     ArgumentsHint(messages)));
  }
  return text;
}

}  // namespace linfer::openai
