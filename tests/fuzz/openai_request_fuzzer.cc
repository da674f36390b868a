// Fuzz target: an OpenAI request body (JSON) through what the HTTP API does before the engine:
// ParseBody, ParseCommonParams (chat and completions), ParsePrompts, ParseChatRequest, the
// engine's own validation of the resulting sampling and stop settings, and the session turn rule
// on the real Qwen3.5 template (a first turn, then the same messages as a continuation); and the
// same body as a /v1/responses request (ParseResponsesRequest, its messages rendered whole and as
// an appended turn, its input items listed) and as a /v1/messages request; a forced tool call's
// grammar in both tool syntaxes, walked a little. The model reply side
// (ChatOutputParser) has its own harness, chat_output_fuzzer.cc.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "engine/structured/json_matcher.h"
#include "server/openai/chat_request.h"
#include "server/openai/messages_request.h"
#include "server/openai/params.h"
#include "server/openai/responses_request.h"
#include "server/openai/session_turns.h"
#include "server/openai/tool_grammar.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using linfer::fuzz::Require;
using namespace linfer::openai;  // NOLINT

const ChatSetup& Qwen() {
  static const ChatSetup* setup = [] {
    auto* s = new ChatSetup;
    std::ifstream f(std::string(LINFER_CHAT_TEMPLATES) + "/qwen3.5.jinja");
    std::stringstream text;
    text << f.rdbuf();
    absl::StatusOr<linfer::tokenizer::ChatTemplate> t =
        linfer::tokenizer::ChatTemplate::Parse(text.str());
    Require(t.ok(), "the Qwen3.5 template parses");
    s->chat_template = *std::move(t);
    s->syntax = DetectSyntax(text.str());
    return s;
  }();
  return *setup;
}

void CheckParams(const Json& body, Api api) {
  linfer::HttpRequest request;
  absl::StatusOr<CommonParams> p = ParseCommonParams(body, api, request);
  if (!p.ok()) {
    Require(!p.status().message().empty(), "an error without a message");
    return;
  }
  Require(p->n >= 1 && p->n <= kMaxN, "n bound");
  Require(p->top_logprobs >= 0 && p->top_logprobs <= 20, "top_logprobs bound");
  Require(p->stop.max_tokens >= 1, "max_tokens bound");
  Require(p->stop.stop_strings.size() <= 16, "stop strings bound");
  for (const std::string& s : p->stop.stop_strings) Require(!s.empty(), "empty stop string");
  // What the engine checks on Submit must not crash on anything the parser let through.
  (void)linfer::ValidateSamplingParams(p->sampling, 4096);
  (void)linfer::ValidateStopParams(p->stop, 4096);
  if (api == Api::kCompletions) {
    absl::StatusOr<std::vector<linfer::PromptInput>> prompts = ParsePrompts(body);
    if (prompts.ok()) {
      Require(!prompts->empty() && prompts->size() <= kMaxPrompts, "prompt count bound");
      for (const linfer::PromptInput& in : *prompts) {
        Require(in.kind != linfer::PromptInput::Kind::kTokenIds || !in.token_ids.empty(),
                "empty token prompt");
      }
    }
  }
}

// A forced call's grammar: built (or refused with a message) in both syntaxes; where built, a walk
// of its first allowed bytes must stay inside the graph.
void CheckForced(const ChatRequest& chat) {
  if (!chat.forced) return;
  for (const ToolFormat format : {ToolFormat::kHermes, ToolFormat::kQwenXml}) {
    absl::StatusOr<std::shared_ptr<const linfer::structured::Grammar>> g =
        ToolCallGrammar(chat.tools, format, *chat.forced);
    if (!g.ok()) {
      Require(!g.status().message().empty(), "a forced-call error without a message");
      continue;
    }
    linfer::structured::JsonMatcher m(g->get());
    for (int step = 0; step < 256; ++step) {
      int b = 0;
      while (b < 256) {
        linfer::structured::JsonMatcher t = m;
        if (t.Feed(static_cast<uint8_t>((b + step * 7) % 256))) break;
        ++b;
      }
      if (b == 256) {
        Require(m.Complete(), "a forced-call grammar with a dead end");
        break;
      }
      Require(m.Feed(static_cast<uint8_t>((b + step * 7) % 256)), "a byte taken twice");
    }
  }
}

void CheckChat(const Json& body) {
  absl::StatusOr<ChatRequest> chat = ParseChatRequest(body);
  if (!chat.ok()) return;
  CheckForced(*chat);
  Require(chat->messages.is_array() && !chat->messages.empty(), "messages normalised");
  absl::StatusOr<TurnText> first = RenderTurn(Qwen(), *chat, 0, std::nullopt);
  if (!first.ok()) return;
  Require(!first->appended && first->history_messages == 0, "a first turn is whole");
  const TurnRecord record = NextRecord(std::nullopt, *chat, *first, 100, std::nullopt);
  Require(record.digests.size() == chat->messages.size() + 1, "the record has every message");
  absl::StatusOr<TurnText> next = RenderTurn(Qwen(), *chat, 100, record);
  if (next.ok()) Require(next->appended, "a later turn appends");
}

void CheckResponses(const Json& body) {
  absl::StatusOr<ResponsesRequest> r = ParseResponsesRequest(body);
  if (!r.ok()) {
    Require(!r.status().message().empty(), "a Responses error without a message");
    return;
  }
  Require(!r->chat.messages.empty(), "a Responses request has messages");
  CheckForced(r->chat);
  Require(r->input_items.is_array() && !r->input_items.empty(), "input items listed");
  for (const Json& item : r->input_items) {
    Require(item.is_object() && item.contains("id") && item.contains("type"), "items typed");
  }
  Require(r->params.n == 1 && r->params.stop.max_tokens >= 1, "Responses bounds");
  (void)linfer::ValidateSamplingParams(r->params.sampling, 4096);
  // The stored conversation round-trips: its messages rebuilt from items parse again.
  Json again = Json::array();
  Require(ItemsToMessages(r->input_items, "input", &again).ok(), "input items re-read");
  Require(again == r->chat.messages, "input items give the same messages");
  absl::StatusOr<TurnText> whole = RenderTurn(Qwen(), r->chat, 0, std::nullopt);
  if (!whole.ok()) return;
  absl::StatusOr<TurnText> next = RenderTurn(Qwen(), r->chat, 100, std::nullopt);
  if (next.ok()) Require(next->appended, "a continuation appends");
}

void CheckMessages(const Json& body) {
  for (bool count_only : {false, true}) {
    absl::StatusOr<MessagesRequest> r = ParseMessagesRequest(body, count_only);
    if (!r.ok()) {
      Require(!r.status().message().empty(), "a Messages error without a message");
      continue;
    }
    Require(r->chat.kwargs.contains("enable_thinking"), "thinking is decided");
    CheckForced(r->chat);
    Require(count_only || r->params.stop.max_tokens >= 1, "Messages max_tokens bound");
    (void)linfer::ValidateSamplingParams(r->params.sampling, 4096);
    (void)RenderTurn(Qwen(), r->chat, 0, std::nullopt);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Json> body = ParseBody(text);
  if (body.ok()) {
    CheckParams(*body, Api::kChat);
    CheckParams(*body, Api::kCompletions);
    CheckChat(*body);
    CheckResponses(*body);
    CheckMessages(*body);
  } else {
    Require(!body.status().message().empty(), "a body error without a message");
  }
  return 0;
}
