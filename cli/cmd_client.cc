// `linfer generate --server HOST:PORT` and `linfer chat`: stream generations from a linfer server
// to the terminal; chat keeps a multi-turn conversation on one session.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/sampling_flags.h"

ABSL_DECLARE_FLAG(std::string, tokens);
ABSL_FLAG(std::string, session, "",
          "Session id to continue (chat creates a new one when not given)");
ABSL_FLAG(bool, keep_session, false,
          "chat: keep the session it creates (no --session) when it ends, to continue it later");

namespace linfer::cli {
namespace {

// The request's sampling and stop fields from the flags; the server validates the values.
v1::GenerateRequest RequestFromFlags() {
  v1::GenerateRequest r;
  r.set_session_id(absl::GetFlag(FLAGS_session));
  FillProtoFromFlags(&r);
  return r;
}

void PrintUsage(const v1::GenerateResponse& last) {
  const v1::Usage& u = last.usage();
  std::string why = last.finish_reason();
  if (last.has_stop_token_id()) absl::StrAppend(&why, " (token ", last.stop_token_id(), ")");
  if (last.has_stop_string()) {
    absl::StrAppend(&why, " (string \"", absl::CHexEscape(last.stop_string()), "\")");
  }
  const double decode_s = u.total_seconds() - u.ttft_seconds();
  const std::string rate =
      u.completion_tokens() > 1 && decode_s > 0
          ? absl::StrCat(", ", static_cast<int64_t>((u.completion_tokens() - 1) / decode_s),
                         " tokens/s")
          : std::string();
  std::fprintf(stderr,
               "linfer: %s; %lld prompt + %lld cached -> %lld generated tokens; "
               "queue %.3f s, first token %.3f s, total %.3f s%s\n",
               why.c_str(), static_cast<long long>(u.prompt_tokens()),
               static_cast<long long>(u.cached_tokens()),
               static_cast<long long>(u.completion_tokens()), u.queue_seconds(), u.ttft_seconds(),
               u.total_seconds(), rate.c_str());
}

void Write(absl::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

// `generate --server`: the prompt is the positional text (streamed back as text) or --tokens
// (printed as {"tokens":[...]} like the local command).
int GenerateRemote(const std::vector<std::string>& args) {
  v1::GenerateRequest request = RequestFromFlags();
  const std::string tokens = absl::GetFlag(FLAGS_tokens);
  if (!tokens.empty() && !args.empty()) return Fail("give a text prompt or --tokens, not both");
  const bool json = !tokens.empty();
  if (json) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenIds(tokens, "--tokens");
    if (!ids.ok()) return Fail(absl::StrCat("--tokens: ", ids.status().message()));
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  } else if (!args.empty()) {
    request.set_text(absl::StrJoin(args, " "));
  } else if (request.session_id().empty()) {
    return Fail("give a prompt: generate --server HOST:PORT \"TEXT\" (or --tokens 1,2,3)");
  }
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectFromFlags();
  if (!client.ok()) return FailStatus(client.status());
  std::vector<int32_t> generated;
  bool wrote = false;
  absl::StatusOr<v1::GenerateResponse> last =
      (*client)->Generate(request, [&](const v1::GenerateResponse& m) {
        generated.insert(generated.end(), m.token_ids().begin(), m.token_ids().end());
        if (!json && !m.text().empty()) {
          Write(m.text());
          wrote = true;
        }
      });
  if (json && (last.ok() || !generated.empty())) {  // a refused request printed nothing
    Write(absl::StrCat("{\"tokens\":[", absl::StrJoin(generated, ","), "]}\n"));
  } else if (wrote) {
    Write("\n");
  }
  if (!last.ok()) return FailStatus(last.status());
  PrintUsage(*last);
  return 0;
}

namespace {

// One chat turn: a text line (with its newline) or "/tokens 1,2,3". Streams the reply: text, or
// the token ids when the model has no tokenizer.
absl::Status ChatTurn(Client& client, const std::string& session, bool has_tokenizer,
                      absl::string_view line) {
  v1::GenerateRequest request = RequestFromFlags();
  request.set_session_id(session);
  if (absl::ConsumePrefix(&line, "/tokens ")) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenIds(line, "/tokens");
    if (!ids.ok()) return ids.status();
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  } else {
    request.set_text(absl::StrCat(line, "\n"));
  }
  bool wrote = false;
  absl::StatusOr<v1::GenerateResponse> last =
      client.Generate(request, [&](const v1::GenerateResponse& m) {
        if (has_tokenizer) {
          Write(m.text());
          wrote = wrote || !m.text().empty();
          return;
        }
        for (int32_t id : m.token_ids()) {
          Write(absl::StrCat(wrote ? " " : "", id));
          wrote = true;
        }
      });
  if (wrote) Write("\n");
  if (!last.ok()) return last.status();
  PrintUsage(*last);
  return absl::OkStatus();
}

}  // namespace

int Chat(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("chat takes no arguments: type the turns on stdin");
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectFromFlags();
  if (!client.ok()) return FailStatus(client.status());
  absl::StatusOr<v1::ModelInfo> info = (*client)->ModelInfo();
  if (!info.ok()) return FailStatus(info.status());
  std::string session = absl::GetFlag(FLAGS_session);
  const bool made = session.empty();  // deleted at the end unless --keep_session
  absl::StatusOr<v1::Session> s =
      session.empty() ? (*client)->CreateSession("") : (*client)->GetSession(session);
  if (!s.ok()) return FailStatus(s.status());
  session = s->session_id();
  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr, "linfer: chatting with %s on session %s (%lld tokens)%s\n",
               info->name().c_str(), session.c_str(), static_cast<long long>(s->tokens()),
               tty ? "; /exit or Ctrl-D ends, /tokens 1,2,3 sends ids" : "");
  int rc = 0;
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit") break;
    if (line.empty()) continue;
    absl::Status st = ChatTurn(**client, session, info->has_tokenizer(), line);
    if (!st.ok()) rc = FailStatus(st);
  }
  if (made && absl::GetFlag(FLAGS_keep_session)) {
    std::fprintf(stderr, "linfer: session %s kept: continue it with --session %s\n",
                 session.c_str(), session.c_str());
  } else if (made) {  // the server's quota counts it until it is deleted
    if (absl::Status st = (*client)->DeleteSession(session); !st.ok()) rc = FailStatus(st);
  }
  return rc;
}

}  // namespace linfer::cli
