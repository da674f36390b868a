// ToolCallParser: Hermes JSON and Qwen XML tool calls, parsed incrementally.
#include "server/openai/tool_parser.h"

#include <cmath>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/json_depth.h"

namespace linfer::openai {
namespace {

constexpr absl::string_view kToolClose = "</tool_call>";
constexpr absl::string_view kFunctionOpen = "<function=";
constexpr absl::string_view kFunctionClose = "</function>";
constexpr absl::string_view kParamOpen = "<parameter=";
constexpr absl::string_view kParamClose = "</parameter>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t SkipSpace(absl::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The value of a complete JSON string literal (quotes included), or nullopt.
std::optional<std::string> DecodeString(absl::string_view literal) {
  Json v = Json::parse(literal, nullptr, false);
  if (v.is_string()) return v.get<std::string>();
  return std::nullopt;
}

// A character of a bare JSON scalar (number, true, false, null, or garbage in their place).
bool IsScalarChar(char c) {
  return !IsSpace(c) && absl::string_view(",:{}[]\"").find(c) == absl::string_view::npos;
}

}  // namespace

const Json& ResolveRef(const Json& property, const Json* root) {
  const Json* at = &property;
  for (int hops = 0; hops < 16 && root != nullptr && at->is_object() && at->contains("$ref");
       ++hops) {
    const Json& ref = (*at)["$ref"];
    if (!ref.is_string()) break;
    const std::string& r = ref.get_ref<const std::string&>();
    if (r == "#") {
      at = root;
      continue;
    }
    const Json* next = nullptr;
    for (const char* key : {"$defs", "definitions"}) {  // "#/$defs/NAME", "#/definitions/NAME"
      const std::string prefix = absl::StrCat("#/", key, "/");
      if (!absl::StartsWith(r, prefix) || !root->is_object() || !root->contains(key)) continue;
      const Json& defs = (*root)[key];
      const std::string name = r.substr(prefix.size());
      if (defs.is_object() && defs.contains(name)) next = &defs[name];
    }
    if (next == nullptr) break;
    at = next;
  }
  return *at;
}

namespace {

// Alternatives that $ref the same definitions (k of them at each of 16 levels) would be walked k^16
// times: a schema object is walked again only when reached higher up than before (`seen`: the
// depth limit may have cut its alternatives off the first time), so at most 17 times.
bool FirstVisit(const Json& node, int depth, absl::flat_hash_map<const Json*, int>& seen) {
  auto [it, inserted] = seen.emplace(&node, depth);
  if (inserted) return true;
  if (depth >= it->second) return false;
  it->second = depth;
  return true;
}

std::string TypeOf(const Json& schema, const Json* root, int depth,
                   absl::flat_hash_map<const Json*, int>& seen) {
  const Json& property = ResolveRef(schema, root);
  if (!property.is_object() || depth > 16 || !FirstVisit(property, depth, seen)) return "";
  const Json& type = property.value("type", Json());
  if (type.is_string()) return type.get<std::string>();
  if (type.is_array()) {
    for (const Json& x : type) {
      if (x.is_string() && x != "null") return x.get<std::string>();
    }
    return "";
  }
  for (const char* key : {"anyOf", "oneOf"}) {  // Optional[int] and the like: the first typed one
    const Json& alts = property.value(key, Json());
    if (!alts.is_array()) continue;
    for (const Json& alt : alts) {
      if (const std::string t = TypeOf(alt, root, depth + 1, seen); !t.empty() && t != "null") {
        return t;
      }
    }
  }
  return "";
}

bool Nullable(const Json& schema, const Json* root, int depth,
              absl::flat_hash_map<const Json*, int>& seen) {
  const Json& property = ResolveRef(schema, root);
  if (!property.is_object() || depth > 16 || !FirstVisit(property, depth, seen)) return false;
  const Json& type = property.value("type", Json());
  if (type == "null" || property.value("nullable", Json()) == true) return true;
  if (const auto c = property.find("const"); c != property.end() && c->is_null()) return true;
  if (type.is_array()) {
    for (const Json& x : type) {
      if (x == "null") return true;
    }
  }
  if (const Json& members = property.value("enum", Json()); members.is_array()) {
    for (const Json& m : members) {
      if (m.is_null()) return true;
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    const Json& alts = property.value(key, Json());
    if (!alts.is_array()) continue;
    for (const Json& alt : alts) {
      if (Nullable(alt, root, depth + 1, seen)) return true;
    }
  }
  return false;
}

}  // namespace

std::string PropertyType(const Json& schema, const Json* root, int depth) {
  absl::flat_hash_map<const Json*, int> seen;
  return TypeOf(schema, root, depth, seen);
}

bool PropertyNullable(const Json& schema, const Json* root, int depth) {
  absl::flat_hash_map<const Json*, int> seen;
  return Nullable(schema, root, depth, seen);
}

bool IsTextType(const std::string& type) {
  return type.empty() || type == "string" || type == "str" || type == "text";
}

namespace {

// The schema of parameter `param` of function `function` in the request's tools (and the
// function's whole `parameters`, for its $refs), or null.
const Json* ParamSchema(const Json* tools, const std::string& function, const std::string& param,
                        const Json** root) {
  if (tools == nullptr || !tools->is_array()) return nullptr;
  for (const Json& t : *tools) {
    const Json* f = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || f->value("name", Json()) != function) continue;
    if (!f->contains("parameters")) return nullptr;
    const Json& params = (*f)["parameters"];
    if (!params.is_object() || !params.contains("properties")) return nullptr;
    const Json& props = params["properties"];
    if (!props.is_object() || !props.contains(param)) return nullptr;
    *root = &params;
    return &props[param];
  }
  return nullptr;
}

// As vLLM's qwen3_coder parser: the value as the schema's type when it parses as one, else a
// string.
std::string ConvertParameterValue(const Json* schema, const Json* root, const std::string& value) {
  const std::string type = schema != nullptr ? PropertyType(*schema, root) : "";
  const std::string lower = absl::AsciiStrToLower(value);
  // "null" is null, except for text that may not be null (a string parameter's word "null").
  if (lower == "null" &&
      (!IsTextType(type) || schema == nullptr || PropertyNullable(*schema, root))) {
    return "null";
  }
  if (type == "integer" || type == "int") {
    int64_t i = 0;
    if (absl::SimpleAtoi(value, &i)) return std::to_string(i);
  } else if (type == "number" || type == "float") {
    double d = 0;
    if (absl::SimpleAtod(value, &d) && std::isfinite(d)) {
      Json parsed = Json::parse(value, nullptr, false);
      return parsed.is_number() ? Dump(parsed) : Dump(Json(d));
    }
  } else if (type == "boolean" || type == "bool") {
    if (lower == "true" || lower == "false") return lower;
  }
  // Any other value of a parameter that is not text as the JSON it is: a type list or anyOf
  // (["integer", "number"]: 3.2; ["boolean", "integer"]: 40) is known here by its first type
  // alone, and a forced call's grammar wrote one of the others.
  if (!IsTextType(type) && JsonTooCostly(value, kMaxBodyDepth).empty()) {
    Json parsed = Json::parse(value, nullptr, false);
    if (!parsed.is_discarded()) return Dump(parsed);
  }
  return Dump(Json(value));
}

}  // namespace

std::string NewToolCallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("call_%016x%08x", rng(), static_cast<uint32_t>(rng()));
}

void ToolCallParser::Begin(bool opened) {
  opened_ = opened;
  buf_.clear();
  json_.clear();
  function_.clear();
  named_ = false;
  in_function_ = false;
  params_ = 0;
  scan_ = HermesScan();
  name_.reset();
  args_at_ = std::string::npos;
  args_end_ = std::string::npos;
  args_sent_ = 0;
}

ToolCallDelta& ToolCallParser::Emit(std::vector<ToolCallDelta>& out) {
  out.push_back({});
  out.back().index = calls_ - 1;
  return out.back();
}

ToolCallParser::Result ToolCallParser::Feed(absl::string_view text, bool final, bool cut,
                                            std::vector<ToolCallDelta>& out) {
  buf_.append(text.data(), text.size());
  Result r;
  r.ended =
      format_ == ToolFormat::kHermes ? FeedHermes(final, cut, out, r) : FeedXml(final, cut, out, r);
  if (r.ended) {
    r.rest = std::move(buf_);
    buf_.clear();
  }
  return r;
}

// ---- Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call> ----

bool ToolCallParser::FeedHermes(bool final, bool cut, std::vector<ToolCallDelta>& out, Result& r) {
  const size_t close = absl::string_view(buf_).find(kToolClose);
  const bool closed = close != std::string::npos || final;
  const size_t take = close != std::string::npos ? close
                      : final                    ? buf_.size()
                                                 : buf_.size() - PartialMarker(buf_, kToolClose);
  json_.append(buf_, 0, take);
  buf_.erase(0, close != std::string::npos ? close + kToolClose.size() : take);
  StreamHermes(closed, close != std::string::npos || !cut, out);
  if (!closed) return false;
  // Not a call after all: the text goes back, unless the reply was cut inside what was becoming
  // a call (an object whose name was still being written is markup, not content; prose after a
  // literal "<tool_call>" is text).
  const size_t first = json_.find_first_not_of(" \t\r\n");
  const bool call_like = first == std::string::npos || json_[first] == '{';
  if (!named_ && (close != std::string::npos || !cut || !call_like)) {
    r.unparsed = absl::StrCat("<tool_call>", json_, close != std::string::npos ? kToolClose : "");
  }
  return true;
}

void ToolCallParser::StreamHermes(bool closed, bool complete, std::vector<ToolCallDelta>& out) {
  ScanHermes();
  if (!named_) {
    if (!name_) return;
    ++calls_;
    ToolCallDelta& d = Emit(out);
    d.id = NewToolCallId();
    d.name = *name_;
    named_ = true;
  }
  if (args_at_ == std::string::npos) {
    if (closed && complete) Emit(out).arguments = "{}";
    return;
  }
  // An open value streams all it has so far but trailing whitespace (whitespace inside it comes
  // out once more follows, so what is sent never depends on where the chunks end).
  size_t end = args_end_;
  if (end == std::string::npos) {
    end = json_.size();
    while (end > args_at_ && IsSpace(json_[end - 1])) --end;
  }
  if (end > args_at_ + args_sent_) {
    Emit(out).arguments = json_.substr(args_at_ + args_sent_, end - args_at_ - args_sent_);
    args_sent_ = end - args_at_;
  }
}

// Only the call object's own keys count: a "name" or "arguments" nested in a value, or written
// inside a string, is part of that value. Malformed JSON is scanned by the same rules (brackets
// are counted, not matched), so it too gives one answer for any chunking.
void ToolCallParser::ScanHermes() {
  HermesScan& s = scan_;
  for (; s.pos < json_.size() && !s.done; ++s.pos) {
    const char c = json_[s.pos];
    if (s.in_string) {
      if (s.escape) {
        s.escape = false;
      } else if (c == '\\') {
        s.escape = true;
      } else if (c == '"') {
        s.in_string = false;
        if (s.depth == 1) EndTopLevelString();
      }
      continue;
    }
    if (s.args_scalar && !IsScalarChar(c)) {  // a bare arguments value ends before `c`
      s.args_scalar = false;
      args_end_ = s.pos;
    }
    if (IsSpace(c)) continue;
    if (s.depth == 0) {  // the first character: the call must be an object
      s.depth = c == '{' ? 1 : 0;
      s.expect_key = true;
      s.done = c != '{';
    } else if (s.depth == 1) {
      ScanTopLevel(c);
    } else if (c == '"') {
      s.in_string = true;
    } else if (c == '{' || c == '[') {
      ++s.depth;
    } else if ((c == '}' || c == ']') && --s.depth == 1 && s.args_nested) {
      s.args_nested = false;
      args_end_ = s.pos + 1;
    }
  }
}

// A token of the call object itself (`c` is not whitespace, not inside a string).
void ToolCallParser::ScanTopLevel(char c) {
  HermesScan& s = scan_;
  if (s.value_of) {  // `c` starts the value of key `*s.value_of`, if it can start a value
    const std::string key = *std::move(s.value_of);
    s.value_of.reset();
    if (absl::string_view(",:}]").find(c) == absl::string_view::npos) {
      if ((key == "arguments" || key == "parameters") && args_at_ == std::string::npos) {
        args_at_ = s.pos;  // the first of the two keys wins
        s.args_nested = c == '{' || c == '[';
        s.args_scalar = IsScalarChar(c);
      } else if (key == "name" && c == '"' && !name_) {
        s.name_open = true;
      }
    }
  }
  std::optional<std::string> key = std::move(s.key);
  s.key.reset();
  const bool key_position = s.expect_key;
  s.expect_key = c == ',';
  switch (c) {
    case '"':
      s.in_string = true;
      s.string_at = s.pos;
      s.key_string = key_position;
      break;
    case ':':
      s.value_of = std::move(key);
      break;
    case '{':
    case '[':
      ++s.depth;
      break;
    case '}':
    case ']':
      s.depth = 0;  // the call object is complete; what follows is ignored
      s.done = true;
      break;
    default:
      break;
  }
}

void ToolCallParser::EndTopLevelString() {
  HermesScan& s = scan_;
  const absl::string_view literal =
      absl::string_view(json_).substr(s.string_at, s.pos + 1 - s.string_at);
  if (s.string_at == args_at_) args_end_ = s.pos + 1;
  if (s.name_open) {
    s.name_open = false;
    name_ = DecodeString(literal);
  }
  if (s.key_string) {
    s.key_string = false;
    s.key = DecodeString(literal);
  }
}

// ---- Qwen XML: <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>

bool ToolCallParser::FeedXml(bool final, bool cut, std::vector<ToolCallDelta>& out, Result& r) {
  bool done = false;
  // Cut inside a function, only its complete parameters count: an unfinished one is left out.
  while (!done && XmlStep(final && !(cut && in_function_), out, r, done)) {
  }
  if (final && !done) {
    if (in_function_ && !cut) Emit(out).arguments = params_ == 0 ? "{}" : "}";
    if (in_function_ && cut) buf_.clear();  // the call's unfinished markup is not content
    in_function_ = false;
    done = true;
  }
  // Nor is a marker cut part-way (`<function=get_wea`, `</tool`), or a block cut right after
  // its `<tool_call>`.
  if (final && cut) {
    const absl::string_view rest = absl::string_view(buf_).substr(SkipSpace(buf_, 0));
    if (rest.empty() || absl::StartsWith(kToolClose, rest) ||
        absl::StartsWith(kFunctionOpen, rest) ||
        (absl::StartsWith(rest, kFunctionOpen) && rest.find('>') == absl::string_view::npos)) {
      buf_.clear();
      r.unparsed.clear();
    }
  }
  return done;
}

bool ToolCallParser::XmlStep(bool final, std::vector<ToolCallDelta>& out, Result& r, bool& done) {
  const size_t start = SkipSpace(buf_, 0);
  const absl::string_view s = absl::string_view(buf_).substr(start);
  if (in_function_) {
    if (absl::StartsWith(s, kParamOpen)) {
      buf_.erase(0, start);
      return XmlParameter(final, out);
    }
    if (absl::StartsWith(s, kFunctionClose)) {
      Emit(out).arguments = params_ == 0 ? "{}" : "}";
      in_function_ = false;
      buf_.erase(0, start + kFunctionClose.size());
      return true;
    }
    if (!final && (absl::StartsWith(kParamOpen, s) || absl::StartsWith(kFunctionClose, s))) {
      return false;
    }
    Emit(out).arguments = params_ == 0 ? "{}" : "}";  // malformed: close the call here
    in_function_ = false;
    done = true;
    return false;
  }
  if (absl::StartsWith(s, kFunctionOpen)) {
    const size_t gt = s.find('>');
    if (gt == absl::string_view::npos) return false;
    function_ = std::string(
        absl::StripAsciiWhitespace(s.substr(kFunctionOpen.size(), gt - kFunctionOpen.size())));
    ++calls_;
    ToolCallDelta& d = Emit(out);
    d.id = NewToolCallId();
    d.name = function_;
    named_ = true;
    in_function_ = true;
    params_ = 0;
    buf_.erase(0, start + gt + 1);
    return true;
  }
  if (absl::StartsWith(s, kToolClose)) {
    buf_.erase(0, start + kToolClose.size());
    done = true;
    return false;
  }
  if (!final && (absl::StartsWith(kFunctionOpen, s) || absl::StartsWith(kToolClose, s))) {
    return false;
  }
  if (!named_ && opened_) {  // no function in this block: the marker was text after all
    r.unparsed = "<tool_call>";
  }
  done = true;
  return false;
}

bool ToolCallParser::XmlParameter(bool final, std::vector<ToolCallDelta>& out) {
  const size_t gt = buf_.find('>');
  if (gt == std::string::npos) return false;
  size_t close = absl::string_view(buf_).find(kParamClose, gt + 1);
  if (close == std::string::npos) {
    if (!final) return false;
    close = buf_.size();
  }
  const std::string name(absl::StripAsciiWhitespace(
      absl::string_view(buf_).substr(kParamOpen.size(), gt - kParamOpen.size())));
  std::string value = buf_.substr(gt + 1, close - gt - 1);
  if (absl::StartsWith(value, "\n")) value.erase(0, 1);
  if (absl::EndsWith(value, "\n")) value.pop_back();
  Emit(out).arguments = absl::StrCat(params_ == 0 ? "{" : ", ", Dump(Json(name)), ": ",
                                     ConvertParameter(name, std::move(value)));
  ++params_;
  buf_.erase(0, std::min(buf_.size(), close + kParamClose.size()));
  return true;
}

std::string ToolCallParser::ConvertParameter(const std::string& name, std::string value) const {
  const Json* root = nullptr;
  const Json* schema = ParamSchema(tools_, function_, name, &root);
  return ConvertParameterValue(schema, root, value);
}

}  // namespace linfer::openai
