// Reading a /v1/responses body (see responses_request.h).
#include "server/openai/responses_request.h"

#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/replace_word.h"
#include "common/status_macros.h"
#include "server/openai/structured_output.h"

namespace linfer::openai {
namespace {

constexpr size_t kMaxItems = 100000;
constexpr size_t kMaxItemId = 256;
constexpr size_t kMaxMetadata = 16;

// Content: a string, or input/output text parts joined by "\n" (the chat API's normalisation).
absl::StatusOr<std::string> ContentText(const Json& content, const std::string& field) {
  return TextParts(
      content, field,
      {{"input_text", "text"}, {"output_text", "text"}, {"text", "text"}, {"refusal", "refusal"}});
}

// Function-call arguments as the templates iterate over them: a JSON object when the text is
// one ({} when it is empty: a call without arguments), else the text.
Json Arguments(const std::string& text) {
  if (absl::StripAsciiWhitespace(text).empty()) return Json::object();
  Json parsed = ParseJsonText(text);
  return parsed.is_object() ? parsed : Json(text);
}

absl::Status ParseTools(const Fields& f, ResponsesRequest& r) {
  ASSIGN_OR_RETURN(const Json* tools, f.Array("tools"));
  Json chat_tools = Json::array();
  if (tools != nullptr) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string where = absl::StrCat("tools[", i, "]");
      const Json& t = (*tools)[i];
      if (!t.is_object()) return FieldError(where, "expected an object");
      Fields tf(t, where + ".");
      ASSIGN_OR_RETURN(std::string type, tf.RequiredString("type"));
      if (type != "function") {
        return FieldError(where + ".type",
                          absl::StrCat(Quote(type), " is not supported (only \"function\" tools)"));
      }
      ASSIGN_OR_RETURN(std::string name, tf.RequiredString("name"));
      ASSIGN_OR_RETURN(std::optional<std::string> description, tf.String("description"));
      ASSIGN_OR_RETURN(const Json* parameters, tf.Object("parameters"));
      ASSIGN_OR_RETURN(std::optional<bool> strict, tf.Bool("strict"));
      (void)strict;
      Json fn = {{"name", name}};
      if (description) fn["description"] = *description;
      if (parameters != nullptr) fn["parameters"] = *parameters;
      chat_tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  Json choice = "auto";
  if (const Json* c = f.Get("tool_choice"); c != nullptr) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s != "auto" && s != "none" && s != "required") {
        return FieldError("tool_choice", absl::StrCat(Quote(s),
                                                      " is not one of \"auto\", \"none\", "
                                                      "\"required\" or {\"type\": \"function\", "
                                                      "\"name\": ...}"));
      }
      if (s == "required") r.chat.forced = ForcedToolCall{"", true, "tool_choice", ".parameters"};
    } else if (c->is_object()) {
      Fields cf(*c, "tool_choice.");
      ASSIGN_OR_RETURN(const std::string type, cf.RequiredString("type"));
      if (type != "function") {
        return FieldError("tool_choice.type",
                          absl::StrCat(Quote(type), " is not supported (only \"function\")"));
      }
      ASSIGN_OR_RETURN(const std::string name, cf.RequiredString("name"));
      r.chat.forced = ForcedToolCall{name, false, "tool_choice.name", ".parameters"};
    } else {
      return FieldError("tool_choice", "expected a string or an object");
    }
    choice = *c;
  }
  if (r.chat.forced && chat_tools.empty()) {
    return FieldError(r.chat.forced->field, "forcing a tool call needs tools");
  }
  ASSIGN_OR_RETURN(std::optional<bool> parallel, f.Bool("parallel_tool_calls"));
  if (r.chat.forced && r.chat.forced->name.empty())
    r.chat.forced->parallel = parallel.value_or(true);
  if (!chat_tools.empty()) r.chat.tools = chat_tools;
  r.chat.parallel_tool_calls = parallel.value_or(true);
  r.chat.parse_tools = !chat_tools.empty() && choice != "none";
  r.echo["tools"] = tools != nullptr ? *tools : Json::array();
  r.echo["tool_choice"] = choice;
  r.echo["parallel_tool_calls"] = r.chat.forced ? r.chat.forced->parallel : parallel.value_or(true);
  return absl::OkStatus();
}

// Fields of the Responses API this server does not implement: refused, never ignored.
absl::Status RefuseUnsupported(const Fields& f) {
  ASSIGN_OR_RETURN(std::optional<bool> background, f.Bool("background"));
  if (background.value_or(false)) {
    return FieldError("background", "not supported (responses run while the request is open)");
  }
  if (f.Get("conversation") != nullptr) {
    return FieldError("conversation",
                      "not supported (continue a conversation with previous_response_id)");
  }
  if (f.Get("prompt") != nullptr) return FieldError("prompt", "prompt templates are not supported");
  ASSIGN_OR_RETURN(std::optional<std::string> truncation, f.String("truncation"));
  if (truncation && *truncation != "disabled") {
    return FieldError("truncation", absl::StrCat(Quote(*truncation),
                                                 " is not supported; a conversation longer than "
                                                 "the context is refused (\"disabled\")"));
  }
  if (const Json* n = f.Get("n"); n != nullptr && *n != 1) {
    return FieldError("n", "a response has one output (the Responses API has no n)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseMetadata(const Fields& f) {
  ASSIGN_OR_RETURN(const Json* metadata, f.Object("metadata"));
  if (metadata == nullptr) return Json::object();
  if (metadata->size() > kMaxMetadata) {
    return FieldError("metadata", absl::StrCat("at most ", kMaxMetadata, " keys"));
  }
  for (const auto& [key, value] : metadata->items()) {
    if (key.size() > 64) return FieldError("metadata", "keys are at most 64 characters");
    if (!value.is_string() || value.get_ref<const std::string&>().size() > 512) {
      return FieldError(absl::StrCat("metadata.", key),
                        "expected a string of at most 512 characters");
    }
  }
  return *metadata;
}

// include, top_logprobs: whether the output text carries logprobs, and how many alternatives.
absl::Status ParseLogprobs(const Fields& f, Json& chat_body, ResponsesRequest& r) {
  bool logprobs = false;
  ASSIGN_OR_RETURN(const Json* include, f.Array("include"));
  if (include != nullptr) {
    static const char* const kKnown[] = {"message.output_text.logprobs",
                                         "reasoning.encrypted_content",
                                         "file_search_call.results",
                                         "web_search_call.results",
                                         "web_search_call.action.sources",
                                         "message.input_image.image_url",
                                         "computer_call_output.output.image_url",
                                         "code_interpreter_call.outputs"};
    for (size_t i = 0; i < include->size(); ++i) {
      const Json& v = (*include)[i];
      const std::string where = absl::StrCat("include[", i, "]");
      if (!v.is_string()) return FieldError(where, "expected a string");
      const std::string& s = v.get_ref<const std::string&>();
      if (std::find(std::begin(kKnown), std::end(kKnown), s) == std::end(kKnown)) {
        return FieldError(where, absl::StrCat(Quote(s), " is not a known include value"));
      }
      logprobs = logprobs || s == "message.output_text.logprobs";
    }
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> top, f.Int("top_logprobs", 0, 20));
  logprobs = logprobs || top.value_or(0) > 0;
  chat_body["logprobs"] = logprobs;
  chat_body["top_logprobs"] = top.value_or(0);
  r.echo["top_logprobs"] = top.value_or(0);
  return absl::OkStatus();
}

absl::Status ParseReasoning(const Fields& f, ResponsesRequest& r) {
  ASSIGN_OR_RETURN(const Json* reasoning, f.Object("reasoning"));
  Json echo = {{"effort", nullptr}, {"summary", nullptr}};
  if (reasoning != nullptr) {
    Fields rf(*reasoning, "reasoning.");
    ASSIGN_OR_RETURN(std::optional<std::string> effort, rf.String("effort"));
    ASSIGN_OR_RETURN(std::optional<std::string> summary, rf.String("summary"));
    if (summary && *summary != "auto" && *summary != "concise" && *summary != "detailed") {
      return FieldError(
          "reasoning.summary",
          absl::StrCat(Quote(*summary), " is not \"auto\", \"concise\" or \"detailed\""));
    }
    // No summaries are written (the reasoning text itself is returned); the setting is echoed.
    if (summary) echo["summary"] = *summary;
    if (effort) {
      RETURN_IF_ERROR(ApplyReasoningEffort(*effort, "reasoning.effort", r.chat.kwargs));
      echo["effort"] = *effort;
    }
  }
  r.echo["reasoning"] = std::move(echo);
  return absl::OkStatus();
}

// An input item as the store keeps it (ItemsToMessages has accepted it).
Json StoredItem(const Json& in) {
  auto text = [&](const char* key) {
    auto it = in.find(key);
    return it != in.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string type = text("type");
  if (type.empty()) type = "message";
  Json out = {{"id", text("id")}, {"type", type}};
  if (type == "message") {
    const std::string role = text("role");
    const char* part = role == "assistant" ? "output_text" : "input_text";
    absl::StatusOr<std::string> content = ContentText(in.value("content", Json()), "content");
    out["role"] = role;
    out["content"] = Json::array({{{"type", part}, {"text", content.value_or("")}}});
    out["status"] = "completed";
  } else if (type == "function_call") {
    out["call_id"] = text("call_id");
    out["name"] = text("name");
    out["arguments"] = text("arguments");
    out["status"] = "completed";
  } else if (type == "function_call_output") {
    absl::StatusOr<std::string> output = ContentText(in.value("output", Json()), "output");
    out["call_id"] = text("call_id");
    out["output"] = output.value_or("");
  } else {  // reasoning: its text is not part of the conversation
    out["summary"] = Json::array();
  }
  if (out["id"] == "") {
    out["id"] = NewItemId(type == "function_call"          ? "fc_"
                          : type == "function_call_output" ? "fco_"
                          : type == "reasoning"            ? "rs_"
                                                           : "msg_");
  }
  return out;
}

// Chat completions' spellings, which the Responses API names otherwise: refused with the name to
// use, never ignored.
absl::Status RefuseChatFields(const Fields& f) {
  static const std::pair<const char*, const char*> kRenamed[] = {
      {"messages", "input"},
      {"max_tokens", "max_output_tokens"},
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format", "text.format"},
      {"structured_outputs", "text.format"},
      {"guided_json", "text.format"},
      {"guided_choice", "text.format"},
      {"logprobs", "include [\"message.output_text.logprobs\"]"},
      {"session_id", "previous_response_id"}};
  for (const auto& [chat, responses] : kRenamed) {
    if (f.Get(chat) != nullptr) {
      return FieldError(chat, absl::StrCat("not a Responses API field; use ", responses));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string NewItemId(absl::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s%016x%016x", prefix, rng(), rng());
}

absl::Status ItemsToMessages(const Json& items, const std::string& field, Json* messages) {
  bool open_assistant = false;  // messages->back() is an assistant message function calls join
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = absl::StrCat(field, "[", i, "]");
    const Json& item = items[i];
    if (!item.is_object()) {
      return FieldError(where, absl::StrCat("expected an object, got ", TypeName(item)));
    }
    Fields f(item, where + ".");
    ASSIGN_OR_RETURN(std::optional<std::string> type, f.String("type"));
    if (!type && f.Get("role") != nullptr) type = "message";
    if (!type) return FieldError(where + ".type", "missing");
    if (*type == "message") {
      ASSIGN_OR_RETURN(std::string role, f.RequiredString("role"));
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system") {
        return FieldError(where + ".role",
                          absl::StrCat(Quote(role),
                                       " is not one of \"user\", \"assistant\", \"system\", "
                                       "\"developer\""));
      }
      const Json* content = f.Get("content");
      if (content == nullptr) return FieldError(where + ".content", "missing");
      ASSIGN_OR_RETURN(std::string text, ContentText(*content, where + ".content"));
      messages->push_back({{"role", role}, {"content", std::move(text)}});
      open_assistant = role == "assistant";
    } else if (*type == "function_call") {
      ASSIGN_OR_RETURN(std::string call_id, f.RequiredString("call_id"));
      ASSIGN_OR_RETURN(std::string name, f.RequiredString("name"));
      ASSIGN_OR_RETURN(std::string arguments, f.RequiredString("arguments"));
      if (!open_assistant) {
        messages->push_back({{"role", "assistant"}, {"content", ""}});
        open_assistant = true;
      }
      Json& m = messages->back();
      if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
      m["tool_calls"].push_back(
          {{"id", call_id},
           {"type", "function"},
           {"function", {{"name", name}, {"arguments", Arguments(arguments)}}}});
    } else if (*type == "function_call_output") {
      ASSIGN_OR_RETURN(std::string call_id, f.RequiredString("call_id"));
      const Json* output = f.Get("output");
      if (output == nullptr) return FieldError(where + ".output", "missing");
      ASSIGN_OR_RETURN(std::string text, ContentText(*output, where + ".output"));
      messages->push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
      open_assistant = false;
    } else if (*type == "reasoning") {
      continue;  // the templates leave past reasoning out; it does not close the message
    } else if (*type == "item_reference") {
      return FieldError(where + ".type",
                        "\"item_reference\" is not supported (send the item itself, or continue a "
                        "stored response with previous_response_id)");
    } else {
      return FieldError(where + ".type",
                        absl::StrCat(Quote(*type),
                                     " is not supported (message, function_call, "
                                     "function_call_output and reasoning items are)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCallOutputs(const Json& input_items, const Json& earlier) {
  absl::flat_hash_set<std::string> calls;
  for (const Json& m : earlier) {
    const auto tool_calls = m.find("tool_calls");
    if (tool_calls == m.end() || !tool_calls->is_array()) continue;
    for (const Json& c : *tool_calls) {
      if (c.is_object() && c.contains("id") && c["id"].is_string()) calls.insert(c["id"]);
    }
  }
  for (size_t i = 0; i < input_items.size(); ++i) {
    const Json& item = input_items[i];
    const std::string type = item.value("type", "");
    const std::string call_id = item.value("call_id", "");
    if (type == "function_call") calls.insert(call_id);
    if (type == "function_call_output" && !calls.contains(call_id)) {
      return FieldError(
          absl::StrCat("input[", i, "].call_id"),
          absl::StrCat("no function call before it has the call_id ", Quote(call_id),
                       earlier.is_null()
                           ? " (nor is there a previous_response_id)"
                           : ", in this input or the previous response's conversation"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const Json& body) {
  ResponsesRequest r;
  Fields f(body);
  RETURN_IF_ERROR(RefuseUnsupported(f));
  RETURN_IF_ERROR(RefuseChatFields(f));

  const Json* input = f.Get("input");
  if (input == nullptr) return FieldError("input", "required");
  if (input->is_string()) {
    r.input_items.push_back({{"type", "message"}, {"role", "user"}, {"content", *input}});
  } else if (input->is_array() && !input->empty() && input->size() <= kMaxItems) {
    r.input_items = *input;
  } else {
    return FieldError("input", absl::StrCat("expected a string or a non-empty array of at most ",
                                            kMaxItems, " items"));
  }
  RETURN_IF_ERROR(ItemsToMessages(r.input_items, "input", &r.chat.messages));
  if (r.chat.messages.empty()) return FieldError("input", "no message or function call output");
  // As input_items lists them: typed, with ids, only the fields this server reads (a client's
  // other fields are not kept), a message's content as text parts.
  // A client's item ids are kept: each at most kMaxItemId bytes and unique (input_items pages
  // by them, as OpenAI's API, which refuses duplicates too).
  Json items = Json::array();
  absl::flat_hash_set<std::string> ids;
  for (size_t i = 0; i < r.input_items.size(); ++i) {
    Json item = StoredItem(r.input_items[i]);
    const std::string& id = item["id"].get_ref<const std::string&>();
    if (id.size() > kMaxItemId) {
      return FieldError(absl::StrCat("input[", i, "].id"),
                        absl::StrCat("longer than ", kMaxItemId, " bytes"));
    }
    if (!ids.insert(id).second) {
      return FieldError(absl::StrCat("input[", i, "].id"),
                        absl::StrCat("duplicate item id ", Quote(id)));
    }
    items.push_back(std::move(item));
  }
  r.input_items = std::move(items);

  ASSIGN_OR_RETURN(std::optional<std::string> instructions, f.String("instructions"));
  r.instructions = instructions;
  ASSIGN_OR_RETURN(std::optional<std::string> previous, f.String("previous_response_id"));
  r.previous_response_id = previous.value_or("");
  // Without a stored response to continue, each function call output answers a call of this
  // input (OpenAI refuses one that answers none); with one, the caller checks against its
  // conversation too.
  if (r.previous_response_id.empty()) RETURN_IF_ERROR(CheckCallOutputs(r.input_items, {}));
  ASSIGN_OR_RETURN(std::optional<bool> store, f.Bool("store"));
  r.store = store.value_or(true);
  ASSIGN_OR_RETURN(const Json* kwargs, f.Object("chat_template_kwargs"));
  if (kwargs != nullptr) r.chat.kwargs = *kwargs;
  RETURN_IF_ERROR(ParseTools(f, r));
  RETURN_IF_ERROR(ParseReasoning(f, r));
  ASSIGN_OR_RETURN(Json metadata, ParseMetadata(f));

  // The fields chat completions reads the same way go through its parser.
  Json chat_body = Json::object();
  for (const char* key :
       {"model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "seed", "logit_bias", "stop", "stop_token_ids", "ignore_eos",
        "min_tokens", "priority", "user", "stream", "cache_salt"}) {
    if (const Json* v = f.Get(key)) chat_body[key] = *v;
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_output, f.Int("max_output_tokens", 1, INT32_MAX));
  if (max_output) chat_body["max_completion_tokens"] = *max_output;
  RETURN_IF_ERROR(ParseLogprobs(f, chat_body, r));
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  ASSIGN_OR_RETURN(const Json* stream_options, f.Object("stream_options"));
  if (stream_options != nullptr && !stream.value_or(false)) {
    return FieldError("stream_options", "only allowed with \"stream\": true");
  }
  ASSIGN_OR_RETURN(r.params, ParseCommonParams(chat_body, Api::kChat, HttpRequest()));

  ASSIGN_OR_RETURN(const Json* text, f.Object("text"));
  Json text_echo = {{"format", {{"type", "text"}}}};
  if (text != nullptr) {
    Fields tf(*text, "text.");
    if (const Json* format = tf.Get("format")) {
      ASSIGN_OR_RETURN(r.params.format, ParseTextFormat(*format, "text.format"));
      text_echo["format"] = *format;
    }
    ASSIGN_OR_RETURN(std::optional<std::string> verbosity, tf.String("verbosity"));
    if (verbosity && *verbosity != "low" && *verbosity != "medium" && *verbosity != "high") {
      return FieldError("text.verbosity",
                        absl::StrCat(Quote(*verbosity), " is not \"low\", \"medium\" or \"high\""));
    }
    if (verbosity) text_echo["verbosity"] = *verbosity;
  }

  r.echo["instructions"] = instructions ? Json(*instructions) : Json(nullptr);
  r.echo["max_output_tokens"] = max_output ? Json(*max_output) : Json(nullptr);
  // Bounds calls to built-in tools, of which this server has none: checked and echoed.
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tool_calls,
                   f.Int("max_tool_calls", 0, int64_t{1} << 31));
  r.echo["max_tool_calls"] = max_tool_calls ? Json(*max_tool_calls) : Json(nullptr);
  r.echo["metadata"] = std::move(metadata);
  r.echo["previous_response_id"] = previous ? Json(*previous) : Json(nullptr);
  r.echo["store"] = r.store;
  r.echo["text"] = std::move(text_echo);
  r.echo["truncation"] = "disabled";
  r.echo["user"] = r.params.user.empty() ? Json(nullptr) : Json(r.params.user);
  r.echo["background"] = false;
  r.echo["service_tier"] = "default";
  return r;
}

namespace {

std::string StringMember(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

bool HasSystemMessage(const Json& messages) {
  for (const Json& m : messages) {
    if (StringMember(m, "role") == "system") return true;
  }
  return false;
}

Json WithSystemFirst(const std::optional<std::string>& instructions, const Json& messages) {
  std::vector<std::string> system;
  if (instructions) system.push_back(*instructions);
  Json rest = Json::array();
  for (const Json& m : messages) {
    if (StringMember(m, "role") == "system") {
      system.push_back(StringMember(m, "content"));
    } else {
      rest.push_back(m);
    }
  }
  if (system.empty()) return rest;
  Json out = Json::array({{{"role", "system"}, {"content", absl::StrJoin(system, "\n\n")}}});
  for (Json& m : rest) out.push_back(std::move(m));
  return out;
}

absl::Status ResponsesTerms(const absl::Status& st) {
  // The chat API's field names in shared code's messages: wherever they stand (the engine says
  // "N for max_tokens"); "messages" only as the field a message begins
  // with (as a word it is ordinary English).
  std::string m(st.message());
  for (const auto& [chat, responses] :
       {std::pair<absl::string_view, absl::string_view>{"max_tokens", "max_output_tokens"},
        {"session_id", "previous_response_id"},
        {"held by the session", "in the previous responses"},
        {"response_format", "text.format"}}) {
    m = ReplaceWord(m, chat, responses);
  }
  absl::string_view rest = m;
  if (absl::ConsumePrefix(&rest, "messages") &&
      (absl::StartsWith(rest, ":") || absl::StartsWith(rest, " "))) {
    m = absl::StrCat("input", rest);
  }
  return m == st.message() ? st : absl::Status(st.code(), m);
}

}  // namespace linfer::openai
