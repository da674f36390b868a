// SaveResponses and LoadResponses.
#include "server/openai/response_store_file.h"

#include <map>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/status_macros.h"

namespace linfer::openai {
namespace {

constexpr int kVersion = 1;

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": not a stored-responses file (", what, ")"));
}

}  // namespace

absl::Status SaveResponses(const std::string& path, const std::vector<OwnedResponse>& responses) {
  std::map<const ConversationTurn*, int> index;
  Json turns = Json::array();
  // Index every turn reachable from a response, oldest first, so "previous" always points back.
  auto add = [&](const ConversationTurn* turn) {
    std::vector<const ConversationTurn*> chain;
    for (const ConversationTurn* t = turn; t != nullptr && !index.contains(t);
         t = t->previous.get()) {
      chain.push_back(t);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const ConversationTurn* t = *it;
      const int previous = t->previous != nullptr ? index.at(t->previous.get()) : -1;
      index[t] = static_cast<int>(turns.size());
      turns.push_back({{"previous", previous}, {"messages", t->messages}});
    }
    return turn != nullptr ? index.at(turn) : -1;
  };
  Json list = Json::array();
  for (const auto& [owner, r] : responses) {
    list.push_back({{"owner", owner},
                    {"id", r->id},
                    {"response", r->response},
                    {"input_items", r->input_items},
                    {"turn", add(r->turn.get())},
                    {"instructions", r->instructions ? Json(*r->instructions) : Json(nullptr)},
                    {"tools", r->tools},
                    {"session_id", r->session_id},
                    {"position", r->position},
                    {"pending", r->pending ? Json(*r->pending) : Json(nullptr)}});
  }
  const Json file = {{"version", kVersion}, {"turns", std::move(turns)}, {"responses", list}};
  return WriteFileAtomic(path, Dump(file));
}

namespace {

absl::StatusOr<std::vector<OwnedResponse>> Load(const std::string& path, int64_t max_bytes) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, max_bytes));
  if (JsonDeeperThan(text, kMaxBodyDepth + 8)) return Corrupt(path, "nested too deep");
  const Json file = Json::parse(text, nullptr, false);
  if (!file.is_object() || file.value("version", Json()) != kVersion) {
    return Corrupt(path, "no version 1 header");
  }
  const Json& turns = file.contains("turns") ? file["turns"] : Json();
  const Json& responses = file.contains("responses") ? file["responses"] : Json();
  if (!turns.is_array() || !responses.is_array()) return Corrupt(path, "no turns and responses");
  std::vector<std::shared_ptr<const ConversationTurn>> built;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Json& t = turns[i];
    const Json previous = t.is_object() ? t.value("previous", Json()) : Json();
    if (!previous.is_number_integer() || previous.get<int64_t>() < -1 ||
        previous.get<int64_t>() >= static_cast<int64_t>(i) || !t.contains("messages") ||
        !t["messages"].is_array()) {
      return Corrupt(path, absl::StrCat("turns[", i, "]"));
    }
    auto turn = std::make_shared<ConversationTurn>();
    if (previous.get<int64_t>() >= 0) turn->previous = built[previous.get<size_t>()];
    turn->messages = t["messages"];
    built.push_back(std::move(turn));
  }
  std::vector<OwnedResponse> out;
  for (size_t i = 0; i < responses.size(); ++i) {
    const Json& r = responses[i];
    const std::string where = absl::StrCat("responses[", i, "]");
    if (!r.is_object()) return Corrupt(path, where);
    auto text_of = [&](const char* key) -> absl::StatusOr<std::string> {
      auto it = r.find(key);
      if (it == r.end() || !it->is_string()) return Corrupt(path, absl::StrCat(where, ".", key));
      return it->get<std::string>();
    };
    StoredResponse s;
    ASSIGN_OR_RETURN(const std::string owner, text_of("owner"));
    ASSIGN_OR_RETURN(s.id, text_of("id"));
    ASSIGN_OR_RETURN(s.session_id, text_of("session_id"));
    const Json turn = r.value("turn", Json());
    const Json position = r.value("position", Json());
    const Json pending = r.value("pending", Json());
    const Json instructions = r.value("instructions", Json());
    if (!turn.is_number_integer() || turn.get<int64_t>() < -1 ||
        turn.get<int64_t>() >= static_cast<int64_t>(built.size()) ||
        !position.is_number_integer() || !(pending.is_null() || pending.is_number_integer()) ||
        !(instructions.is_null() || instructions.is_string()) || !r.contains("response") ||
        !r["response"].is_object() || !r.contains("input_items") || !r["input_items"].is_array()) {
      return Corrupt(path, where);
    }
    s.response = r["response"];
    s.input_items = r["input_items"];
    if (turn.get<int64_t>() >= 0) s.turn = built[turn.get<size_t>()];
    if (instructions.is_string()) s.instructions = instructions.get<std::string>();
    s.tools = r.value("tools", Json());
    s.position = position.get<int64_t>();
    if (pending.is_number_integer()) s.pending = pending.get<int32_t>();
    out.emplace_back(owner, std::make_shared<const StoredResponse>(std::move(s)));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<OwnedResponse>> LoadResponses(const std::string& path,
                                                         int64_t max_bytes) {
  try {  // the parsed file takes several times its size
    return Load(path, max_bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("not enough memory to load ", path));
  }
}

}  // namespace linfer::openai
