// SchemaRegexes: a schema's patterns and formats compiled to DFAs (schema_regex.h).
#include "engine/structured/schema_regex.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/structured/regex_dfa.h"
#include "engine/structured/string_formats.h"

namespace linfer::structured {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

const Json* Member(const Json& s, const char* key) {
  auto it = s.find(key);
  return it == s.end() ? nullptr : &*it;
}

}  // namespace

bool SchemaRegexes::KnownFormat(const Json& s) {
  const Json* format = Member(s, "format");
  return format != nullptr && format->is_string() &&
         FormatOf(format->get<std::string>()).pattern != nullptr;
}

absl::Status SchemaRegexes::Apply(const Json& s, const std::string& path, Grammar& g, int32_t n) {
  const Json* pattern = Member(s, "pattern");
  const Json* format = Member(s, "format");
  StringFormat known{nullptr};
  if (format != nullptr && format->is_string()) known = FormatOf(format->get<std::string>());
  if (pattern == nullptr && known.pattern == nullptr) return absl::OkStatus();
  if (pattern != nullptr && known.pattern != nullptr) {
    return Invalid(absl::StrCat(path, ".pattern"),
                   absl::StrCat("not supported beside format '", format->get<std::string>(),
                                "' (give one of them)"));
  }
  if (pattern != nullptr && !pattern->is_string()) {
    return Invalid(absl::StrCat(path, ".pattern"), "expected a string");
  }
  RegexOptions options;
  options.flavor = RegexFlavor::kEcma;
  options.search = pattern != nullptr;
  options.json_string = true;
  options.min_chars = g.nodes[n].min;
  options.max_chars = std::min(g.nodes[n].max, known.max_chars);
  const std::string where = absl::StrCat(path, pattern ? ".pattern" : ".format");
  const std::string text = pattern ? pattern->get<std::string>() : std::string(known.pattern);
  // The same text and lengths again (a format on many fields): the same DFA.
  const auto key = std::make_tuple(text, options.search, options.min_chars, options.max_chars);
  g.nodes[n].regex_is_format = pattern == nullptr;
  if (auto it = memo_.find(key); it != memo_.end()) {
    g.nodes[n].regex = it->second;
    return absl::OkStatus();
  }
  if (g.regexes.size() >= kMaxRegexes) {
    return Invalid(path, absl::StrCat("the schema has more than ", kMaxRegexes,
                                      " distinct patterns and formats"));
  }
  // One budget of compile time for all of a schema's patterns.
  options.max_work = std::min(kMaxRegexWork, budget_.work - work_);
  if (options.max_work <= 0) return Invalid(where, RegexWorkSpent(budget_));
  absl::StatusOr<RegexDfa> dfa = CompileRegex(text, options, where);
  if (!dfa.ok() && options.max_work < kMaxRegexWork &&
      absl::StrContains(dfa.status().message(), "takes too long to compile")) {
    return Invalid(where, RegexWorkSpent(budget_));
  }
  if (!dfa.ok()) return dfa.status();
  work_ += dfa->compile_work;
  g.regex_work = work_;
  bytes_ += dfa->MemoryBytes();
  if (bytes_ > budget_.bytes) return Invalid(where, RegexBytesSpent(budget_));
  g.nodes[n].regex = static_cast<int32_t>(g.regexes.size());
  memo_[key] = g.nodes[n].regex;
  g.regexes.push_back(std::make_shared<const RegexDfa>(*std::move(dfa)));
  return absl::OkStatus();
}

}  // namespace linfer::structured
