// `linfer sessions list|create|get|fork|delete|export|import --server HOST:PORT`: manage a
// server's sessions. Sessions print as one JSON object per line.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/client.h"
#include "cli/commands.h"

ABSL_DECLARE_FLAG(std::string, session);
ABSL_FLAG(std::string, file, "", "sessions export/import: the state blob file");

namespace linfer::cli {
namespace {

constexpr char kUsage[] =
    "usage: linfer sessions --server HOST:PORT list | create [ID] | get ID | fork ID [NEW_ID] | "
    "delete ID | export ID --file F | import [NEW_ID] --file F";

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (u < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", u);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

void PrintSession(const v1::Session& s) {
  std::printf(
      "{\"session_id\":%s,\"tier\":%s,\"tokens\":%lld,\"busy\":%s,\"turns\":%lld,"
      "\"created_unix_ms\":%lld,\"last_used_unix_ms\":%lld}\n",
      JsonString(s.session_id()).c_str(), JsonString(s.tier()).c_str(),
      static_cast<long long>(s.tokens()), s.busy() ? "true" : "false",
      static_cast<long long>(s.turns()), static_cast<long long>(s.created_unix_ms()),
      static_cast<long long>(s.last_used_unix_ms()));
  std::fflush(stdout);
}

int PrintOrFail(const absl::StatusOr<v1::Session>& s) {
  if (!s.ok()) return FailStatus(s.status());
  PrintSession(*s);
  return 0;
}

// args[i], else --session for the first id, else empty.
std::string Arg(const std::vector<std::string>& args, size_t i) {
  if (i < args.size()) return args[i];
  return i == 1 ? absl::GetFlag(FLAGS_session) : std::string();
}

int Export(Client& client, const std::string& id) {
  const std::string path = absl::GetFlag(FLAGS_file);
  if (path.empty()) return Fail("sessions export: --file FILE is required");
  absl::StatusOr<std::string> blob = client.ExportSession(id);
  if (!blob.ok()) return FailStatus(blob.status());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(blob->data(), static_cast<std::streamsize>(blob->size()));
  out.close();
  if (!out) return Fail(absl::StrCat("cannot write ", path));
  std::fprintf(stderr, "linfer: wrote %zu bytes of session %s to %s\n", blob->size(), id.c_str(),
               path.c_str());
  return 0;
}

int Import(Client& client, const std::string& id) {
  const std::string path = absl::GetFlag(FLAGS_file);
  if (path.empty()) return Fail("sessions import: --file FILE is required");
  return PrintOrFail(client.ImportSession(id, path));
}

}  // namespace

int Sessions(const std::vector<std::string>& args) {
  if (args.empty()) return Fail(kUsage);
  const std::string& verb = args[0];
  const std::string id = Arg(args, 1);
  const size_t max_args = verb == "list" ? 1 : verb == "fork" ? 3 : 2;
  if (args.size() > max_args) return Fail(absl::StrCat("too many arguments; ", kUsage));
  const bool needs_id = verb == "get" || verb == "fork" || verb == "delete" || verb == "export";
  if (needs_id && id.empty()) {
    return Fail(absl::StrCat("sessions ", verb, ": give the session id; ", kUsage));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectFromFlags();
  if (!client.ok()) return FailStatus(client.status());
  Client& c = **client;
  if (verb == "list") {
    absl::StatusOr<std::vector<v1::Session>> all = c.ListSessions();
    if (!all.ok()) return FailStatus(all.status());
    for (const v1::Session& s : *all) PrintSession(s);
    return 0;
  }
  if (verb == "create") return PrintOrFail(c.CreateSession(id));
  if (verb == "get") return PrintOrFail(c.GetSession(id));
  if (verb == "fork") return PrintOrFail(c.ForkSession(id, Arg(args, 2)));
  if (verb == "delete") {
    absl::Status st = c.DeleteSession(id);
    if (!st.ok()) return FailStatus(st);
    std::fprintf(stderr, "linfer: deleted session %s\n", id.c_str());
    return 0;
  }
  if (verb == "export") return Export(c, id);
  if (verb == "import") return Import(c, id);
  return Fail(absl::StrCat("unknown sessions command '", verb, "'; ", kUsage));
}

}  // namespace linfer::cli
