// Reading a /v1/messages body (see messages_request.h).
#include "server/openai/messages_request.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace linfer::openai {
namespace {

constexpr size_t kMaxMessages = 100000;

// Text: a string, or text blocks joined by "\n".
absl::StatusOr<std::string> Text(const Json& content, const std::string& field) {
  return TextParts(content, field, {{"text", "text"}});
}

absl::Status Unsupported(const std::string& where, const std::string& type,
                         const std::string& role) {
  if (type == "tool_result" || type == "tool_use" || type == "thinking" ||
      type == "redacted_thinking") {
    return FieldError(where + ".type", absl::StrCat(Quote(type), " blocks go in ",
                                                    type == "tool_result" ? "user" : "assistant",
                                                    " messages, not ", role, " ones"));
  }
  return FieldError(where + ".type",
                    absl::StrCat(Quote(type),
                                 " is not supported (this server takes text, tool_use, tool_result "
                                 "and thinking blocks)"));
}

// One API message as chat messages (a user message's tool results come first, as tool messages),
// each with the field it came from.
absl::Status AddMessage(const Json& in, size_t i, Json* out, std::vector<std::string>* fields) {
  const std::string field = absl::StrCat("messages[", i, "]");
  if (!in.is_object()) {
    return FieldError(field, absl::StrCat("expected an object, got ", TypeName(in)));
  }
  Fields f(in, field + ".");
  ASSIGN_OR_RETURN(std::string role, f.RequiredString("role"));
  if (role != "user" && role != "assistant") {
    return FieldError(field + ".role", absl::StrCat(Quote(role),
                                                    " is not \"user\" or \"assistant\" (the system "
                                                    "prompt is the top-level \"system\")"));
  }
  const Json* content = f.Get("content");
  if (content == nullptr) return FieldError(field + ".content", "missing");
  if (content->is_string()) {
    out->push_back({{"role", role}, {"content", *content}});
    fields->push_back(field);
    return absl::OkStatus();
  }
  if (!content->is_array()) {
    return FieldError(field + ".content", absl::StrCat("expected a string or an array of content "
                                                       "blocks, got ",
                                                       TypeName(*content)));
  }
  if (content->empty() && role == "user") {  // as Anthropic's API: only a prefill may be empty
    return FieldError(field + ".content", "give at least one content block");
  }
  std::vector<std::string> text, thinking;
  Json calls = Json::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const std::string where = absl::StrCat(field, ".content[", k, "]");
    const Json& block = (*content)[k];
    if (!block.is_object()) return FieldError(where, "expected an object");
    Fields b(block, where + ".");
    ASSIGN_OR_RETURN(std::string type, b.RequiredString("type"));
    if (type == "text") {
      ASSIGN_OR_RETURN(std::string t, b.RequiredString("text"));
      text.push_back(std::move(t));
    } else if (type == "tool_result" && role == "user") {
      ASSIGN_OR_RETURN(std::string id, b.RequiredString("tool_use_id"));
      std::string result;
      if (const Json* c = b.Get("content"); c != nullptr) {
        ASSIGN_OR_RETURN(result, Text(*c, where + ".content"));
      }
      ASSIGN_OR_RETURN(std::optional<bool> is_error, b.Bool("is_error"));
      if (is_error.value_or(false)) result = absl::StrCat("Error: ", result);
      out->push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
      fields->push_back(where);
    } else if (type == "tool_use" && role == "assistant") {
      ASSIGN_OR_RETURN(std::string id, b.RequiredString("id"));
      ASSIGN_OR_RETURN(std::string name, b.RequiredString("name"));
      ASSIGN_OR_RETURN(const Json* input, b.Object("input"));
      calls.push_back(
          {{"id", id},
           {"type", "function"},
           {"function",
            {{"name", name}, {"arguments", input != nullptr ? *input : Json::object()}}}});
    } else if (type == "thinking" && role == "assistant") {
      ASSIGN_OR_RETURN(std::string t, b.RequiredString("thinking"));
      thinking.push_back(std::move(t));
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;
    } else {
      return Unsupported(where, type, role);
    }
  }
  if (role == "user" && text.empty()) return absl::OkStatus();  // tool results only
  Json m = {{"role", role}, {"content", absl::StrJoin(text, "\n")}};
  if (!thinking.empty()) m["reasoning_content"] = absl::StrJoin(thinking, "\n");
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out->push_back(std::move(m));
  fields->push_back(field);
  return absl::OkStatus();
}

absl::Status ParseTools(const Fields& f, MessagesRequest& r) {
  ASSIGN_OR_RETURN(const Json* tools, f.Array("tools"));
  Json chat_tools = Json::array();
  if (tools != nullptr) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string where = absl::StrCat("tools[", i, "]");
      if (!(*tools)[i].is_object()) return FieldError(where, "expected an object");
      Fields t((*tools)[i], where + ".");
      ASSIGN_OR_RETURN(std::optional<std::string> type, t.String("type"));
      if (type && *type != "custom") {
        return FieldError(where + ".type",
                          absl::StrCat(Quote(*type), " is not supported (only client tools)"));
      }
      ASSIGN_OR_RETURN(std::string name, t.RequiredString("name"));
      ASSIGN_OR_RETURN(std::optional<std::string> description, t.String("description"));
      ASSIGN_OR_RETURN(const Json* schema, t.Object("input_schema"));
      if (schema == nullptr) return FieldError(where + ".input_schema", "missing");
      Json fn = {{"name", name}, {"parameters", *schema}};
      if (description) fn["description"] = *description;
      chat_tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  std::string choice = "auto";
  ASSIGN_OR_RETURN(const Json* tool_choice, f.Object("tool_choice"));
  if (tool_choice != nullptr) {
    Fields cf(*tool_choice, "tool_choice.");
    ASSIGN_OR_RETURN(choice, cf.RequiredString("type"));
    ASSIGN_OR_RETURN(std::optional<bool> single, cf.Bool("disable_parallel_tool_use"));
    // At most one tool_use block, whichever the choice (the formatter keeps the first).
    r.chat.parallel_tool_calls = !single.value_or(false);
    if (choice == "any") {
      r.chat.forced = ForcedToolCall{"", !single.value_or(false), "tool_choice", ".input_schema"};
    } else if (choice == "tool") {
      ASSIGN_OR_RETURN(const std::string name, cf.RequiredString("name"));
      r.chat.forced = ForcedToolCall{name, false, "tool_choice.name", ".input_schema"};
    } else if (choice != "auto" && choice != "none") {
      return FieldError(
          "tool_choice.type",
          absl::StrCat(Quote(choice), " is not one of \"auto\", \"any\", \"tool\" or \"none\""));
    }
  }
  if (r.chat.forced && chat_tools.empty()) {
    return FieldError(r.chat.forced->field, "forcing a tool call needs tools");
  }
  if (!chat_tools.empty()) r.chat.tools = std::move(chat_tools);
  r.chat.parse_tools = !r.chat.tools.is_null() && choice != "none";
  return absl::OkStatus();
}

// `budget`: thinking.budget_tokens of an enabled block, else null.
absl::Status ParseThinking(const Fields& f, MessagesRequest& r, std::optional<int64_t>* budget) {
  ASSIGN_OR_RETURN(const Json* thinking, f.Object("thinking"));
  bool on = false;
  if (thinking != nullptr) {
    Fields t(*thinking, "thinking.");
    ASSIGN_OR_RETURN(std::string type, t.RequiredString("type"));
    if (type != "enabled" && type != "disabled" && type != "adaptive") {
      return FieldError(
          "thinking.type",
          absl::StrCat(Quote(type), " is not \"enabled\", \"adaptive\" or \"disabled\""));
    }
    ASSIGN_OR_RETURN(*budget, t.Int("budget_tokens", 0, INT32_MAX));
    if (type != "enabled") budget->reset();
    on = type != "disabled";
  }
  if (!r.chat.kwargs.contains("enable_thinking")) r.chat.kwargs["enable_thinking"] = on;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MessagesRequest> ParseMessagesRequest(const Json& body, bool count_only,
                                                     const HttpRequest& request) {
  MessagesRequest r;
  Fields f(body);
  for (const char* key : {"mcp_servers", "container"}) {
    if (f.Get(key) != nullptr) return FieldError(key, "not supported");
  }
  ASSIGN_OR_RETURN(const Json* messages, f.Array("messages"));
  if (messages == nullptr || messages->empty()) {
    return FieldError("messages", "give at least one message");
  }
  if (messages->size() > kMaxMessages) {
    return FieldError("messages", absl::StrCat("more than ", kMaxMessages));
  }
  if (const Json* system = f.Get("system")) {
    ASSIGN_OR_RETURN(std::string text, Text(*system, "system"));
    r.chat.messages.push_back({{"role", "system"}, {"content", std::move(text)}});
    r.chat.message_fields.push_back("system");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    RETURN_IF_ERROR(AddMessage((*messages)[i], i, &r.chat.messages, &r.chat.message_fields));
  }
  r.final_message = absl::StrCat("messages[", messages->size() - 1, "]");
  // A final assistant message with nothing in it (content "" or []) is no prefill (Anthropic's
  // API takes it): the reply starts a fresh assistant turn.
  if (const Json& last = r.chat.messages.back();
      messages->back().value("role", Json()) == "assistant" &&
      last.value("role", Json()) == "assistant" && last.value("content", Json()) == "" &&
      !last.contains("tool_calls") && !last.contains("reasoning_content")) {
    r.chat.messages.erase(r.chat.messages.end() - 1);
    r.chat.message_fields.pop_back();
    // (an assistant message before it is then the prefill)
    if (messages->size() >= 2)
      r.final_message = absl::StrCat("messages[", messages->size() - 2, "]");
  }
  if (r.chat.messages.empty() || r.chat.messages.back().value("role", Json()) == "system") {
    return FieldError("messages", "no message with content to answer");
  }
  ASSIGN_OR_RETURN(const Json* kwargs, f.Object("chat_template_kwargs"));
  if (kwargs != nullptr) r.chat.kwargs = *kwargs;
  RETURN_IF_ERROR(ParseTools(f, r));
  std::optional<int64_t> budget;
  RETURN_IF_ERROR(ParseThinking(f, r, &budget));
  ASSIGN_OR_RETURN(const Json* metadata, f.Object("metadata"));
  if (metadata != nullptr) {
    ASSIGN_OR_RETURN(std::optional<std::string> user,
                     Fields(*metadata, "metadata.").String("user_id"));
    (void)user;
  }

  // The fields chat completions reads the same way go through its parser.
  Json chat_body = Json::object();
  for (const char* key : {"model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                          "presence_penalty", "frequency_penalty", "seed", "stream", "priority",
                          "session_id", "create_session", "cache_salt"}) {
    if (const Json* v = f.Get(key)) chat_body[key] = *v;
  }
  if (count_only && chat_body.contains("session_id")) {
    return FieldError("session_id",
                      "count_tokens counts a whole conversation: not supported with a session");
  }
  // As Anthropic's API: stop_sequences is a list of strings, temperature within [0, 1].
  ASSIGN_OR_RETURN(const Json* stop, f.Array("stop_sequences"));
  if (stop != nullptr) chat_body["stop"] = *stop;
  if (const Json* t = f.Get("temperature");
      t != nullptr && t->is_number() && (t->get<double>() < 0 || t->get<double>() > 1)) {
    return FieldError("temperature", absl::StrCat("must be in [0, 1]; got ", t->dump()));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, f.Int("max_tokens", 1, INT32_MAX));
  if (!max_tokens && !count_only) return FieldError("max_tokens", "required");
  if (max_tokens) chat_body["max_tokens"] = *max_tokens;
  if (budget) chat_body["thinking_token_budget"] = *budget;
  absl::StatusOr<CommonParams> params =
      ParseCommonParams(chat_body, Api::kChat, count_only ? HttpRequest() : request);
  if (!params.ok()) {  // the chat parser's "stop" is this API's stop_sequences
    absl::string_view m = params.status().message();
    if (absl::ConsumePrefix(&m, "stop")) {
      return absl::InvalidArgumentError(absl::StrCat("stop_sequences", m));
    }
    return params.status();
  }
  r.params = *std::move(params);
  return r;
}

}  // namespace linfer::openai
