// Compares linfer's chat template engine with jinja2 driven as transformers drives it: the
// expected renders (or errors) come from chat_template/oracle.py, written by the ctest fixture
// tokenizer.chat_template_oracle_setup. Every template x conversation and every feature snippet
// must render byte for byte the same, and fail where jinja2 fails.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "gtest/gtest.h"
#include "models/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"

namespace linfer::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;

const OJson& Expected() {
  static const OJson* expected = [] {
    auto* j = new OJson();
    const char* path = std::getenv("LINFER_CHAT_TEMPLATE_ORACLE");
    if (path == nullptr) return j;
    absl::StatusOr<std::string> text = ReadFile(path);
    if (text.ok()) *j = OJson::parse(*text, nullptr, /*allow_exceptions=*/false);
    return j;
  }();
  return *expected;
}

ChatTemplateOptions Options() {
  ChatTemplateOptions o;
  o.now = absl::FromUnixMicros(Expected().value("now_micros", int64_t{0}));
  return o;
}

// Checks one expected entry ({template source, vars, output|error}); returns a failure message
// or "" when C++ agrees with jinja2.
std::string Check(const std::string& source, const OJson& entry) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, Options());
  const bool want_error = entry.contains("error");
  if (!t.ok()) {
    if (want_error) return "";
    return "parse failed: " + t.status().ToString();
  }
  if (entry.value("parse_error", false)) {
    // jinja2 rejects some templates at compile time that this engine rejects only when the bad
    // part runs (unknown filters/tests, break outside a loop): rendering must fail then.
    absl::StatusOr<std::string> r = t->Render(entry["vars"]);
    if (!r.ok()) return "";
    return "jinja2 rejects the template (" + entry["error"].get<std::string>() +
           ") but it parsed and rendered: " + OJson(*r).dump();
  }
  absl::StatusOr<std::string> r = t->Render(entry["vars"]);
  if (want_error) {
    if (r.ok()) {
      return "jinja2 raised " + entry["error"].get<std::string>() +
             " but it rendered: " + OJson(*r).dump();
    }
    const std::string err = entry["error"].get<std::string>();
    const std::string prefix = "TemplateError: ";  // raise_exception(message)
    if (err.rfind(prefix, 0) == 0 &&
        r.status().message().find(err.substr(prefix.size())) == absl::string_view::npos) {
      return "raise_exception message lost: want " + err + ", got " + r.status().ToString();
    }
    return "";
  }
  if (!r.ok()) return "render failed: " + r.status().ToString();
  const std::string want = entry["output"].get<std::string>();
  if (*r == want) return "";
  size_t at = 0;
  while (at < want.size() && at < r->size() && want[at] == (*r)[at]) ++at;
  return "differs at byte " + std::to_string(at) + "\n  want " +
         OJson(want.substr(at > 40 ? at - 40 : 0, 120)).dump() + "\n  got  " +
         OJson(r->substr(at > 40 ? at - 40 : 0, 120)).dump();
}

void RequireOracle() {
  ASSERT_NE(std::getenv("LINFER_CHAT_TEMPLATE_ORACLE"), nullptr)
      << "LINFER_CHAT_TEMPLATE_ORACLE is not set: run through ctest, whose fixture "
         "tokenizer.chat_template_oracle_setup writes the expected renders";
  ASSERT_TRUE(Expected().is_object() && Expected().contains("results"))
      << "cannot read the oracle output " << std::getenv("LINFER_CHAT_TEMPLATE_ORACLE");
}

TEST(ChatTemplateOracle, SnippetsMatchJinja2) {
  RequireOracle();
  int total = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const OJson& s : Expected()["snippets"]) {
    ++total;
    const std::string msg = Check(s["template"].get<std::string>(), s);
    if (msg.empty()) continue;
    ++failed;
    ADD_FAILURE() << "snippet " << s["name"].get<std::string>() << " "
                  << OJson(s["template"]).dump() << ": " << msg;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("snippets: %d, identical to jinja2 %s: %d (%.1f ms)\n", total,
              Expected().value("jinja2_version", std::string("?")).c_str(), total - failed, ms);
  EXPECT_GE(total, 100);
}

class TemplateOracleTest : public testing::TestWithParam<std::string> {};

TEST_P(TemplateOracleTest, ConversationsMatchJinja2) {
  RequireOracle();
  std::string source;
  for (const OJson& t : Expected()["templates"]) {
    if (t["name"] != GetParam()) continue;
    if (t.value("missing", false)) {
      GTEST_SKIP() << "SKIPPED " << GetParam() << ": " << t.value("path", std::string())
                   << " is absent (the tokenizer.oracle_setup fixture npm-installs it)";
    }
    source = t["source"].get<std::string>();
  }
  ASSERT_FALSE(source.empty()) << "no template " << GetParam() << " in the oracle output";
  int total = 0, failed = 0, errors = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const OJson& r : Expected()["results"]) {
    if (r["template"] != GetParam()) continue;
    ++total;
    errors += r.contains("error") ? 1 : 0;
    const std::string msg = Check(source, r);
    if (msg.empty()) continue;
    ++failed;
    ADD_FAILURE() << GetParam() << " x " << r["case"].get<std::string>() << ": " << msg;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %d conversations (%d where jinja2 raises), identical %d (%.1f ms)\n",
              GetParam().c_str(), total, errors, total - failed, ms);
  EXPECT_GE(total, 20);
}

INSTANTIATE_TEST_SUITE_P(Templates, TemplateOracleTest,
                         testing::Values("qwen3.5", "qwen3.6", "glm-4.6", "kimi-k2", "minimax-m2",
                                         "mistral-small-3.1", "npm-qwen3", "npm-llama3",
                                         "npm-llama3_1", "npm-gemma3", "npm-gemini",
                                         "npm-deepseek_v3"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace linfer::tokenizer
