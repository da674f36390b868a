// Token constraints through the engine (engine/token_constraint.h), on the CPU and CUDA: structured
// output's grammar masks and the thinking budget's Free() and Forced() paths, over a byte
// vocabulary (the gdn_default fixture's first 96 ids as printable ASCII and a newline), with the
// device pre-sampler on.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/thinking_budget.h"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::DeviceCase;
using testing_util::Greedy;

char ByteOf(int32_t t) { return static_cast<char>(t < 95 ? 32 + t : '\n'); }

class ConstrainedOnDevice : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
  }
  Device device() const { return GetParam().device; }
  // gdn_default with the pre-sampler on (constrained rows come back whole, Free() ones do not).
  std::unique_ptr<Engine> Make() const {
    EngineOptions options;
    options.presample = EngineOptions::Presampling::kOn;
    return testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device()),
                                      std::move(options), "gdn_default");
  }
  // The vocabulary's bytes: ids 0-94 printable ASCII, 95 a newline, none for the rest.
  static std::vector<std::optional<std::string>> ByteVocabulary(const Engine& engine) {
    const int64_t vocab = engine.model().vocab_size();
    EXPECT_GE(vocab, 96);
    std::vector<std::optional<std::string>> bytes(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < std::min<int64_t>(vocab, 96); ++i) bytes[i] = std::string(1, ByteOf(i));
    return bytes;
  }
};

// Structured output through the engine: a constraint over the byte vocabulary holds every request —
// greedy (the unconstrained argmax when it is allowed, else the mask), sampled, several at once in
// one batch, with the pre-sampler on (constrained rows come back whole) — to a schema whose
// documents are short, so each ends by itself (kStop with no token after the closing brace) and
// parses to the schema's shape.
TEST_P(ConstrainedOnDevice, StructuredOutputFollowsItsConstraint) {
  auto engine = Make();
  ASSERT_TRUE(engine != nullptr);
  auto index = std::make_shared<const structured::TokenIndex>(ByteVocabulary(*engine));
  absl::StatusOr<std::shared_ptr<const structured::Grammar>> grammar =
      structured::CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{
          "a":{"type":"integer"},"b":{"enum":["x","yz"]},"c":{"type":"boolean"},
          "d":{"type":"string","maxLength":4}},"required":["a","b","c","d"]})"),
                                    "schema");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = Greedy(testing_util::Prompt(12 + i, 40 + i), 400);
    if (i % 2 == 1) {
      r.sampling.temperature = 1.0f;
      r.sampling.top_p = i == 3 ? 0.9f : 1.0f;
      r.sampling.seed = i;
    }
    r.constraint = std::make_shared<structured::JsonConstraint>(*grammar, index);
    requests.push_back(std::move(r));
  }
  std::vector<std::unique_ptr<testing_util::Collector>> cs;
  for (const GenerateRequest& r : requests) {
    cs.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(engine->Submit(r, cs.back()->Sink()).ok());
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    SCOPED_TRACE(i);
    cs[i]->Wait();
    const testing_util::Result got = cs[i]->result();
    EXPECT_EQ(got.finish, Finish::kStop);
    std::string doc;
    for (int32_t t : got.tokens) doc.push_back(ByteOf(t));
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse(doc, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << doc;
    ASSERT_TRUE(v.is_object()) << doc;
    std::vector<std::string> keys;
    for (const auto& [k, x] : v.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d"})) << doc;
    EXPECT_TRUE(v["a"].is_number_integer()) << doc;
    EXPECT_TRUE(v["b"] == "x" || v["b"] == "yz") << doc;
    EXPECT_TRUE(v["c"].is_boolean()) << doc;
    EXPECT_TRUE(v["d"].is_string()) << doc;
  }
  // A grammar the vocabulary cannot spell ("é" from printable ASCII) ends in a clear error, not
  // a hang or a crash, after the one byte it can spell.
  absl::StatusOr<std::shared_ptr<const structured::Grammar>> unspellable =
      structured::CompileJsonSchema(nlohmann::ordered_json::parse(R"({"enum":["é"]})"), "schema");
  ASSERT_TRUE(unspellable.ok()) << unspellable.status();
  GenerateRequest bad = Greedy(testing_util::Prompt(8, 3), 10);
  bad.constraint = std::make_shared<structured::JsonConstraint>(*unspellable, index);
  testing_util::Collector bc;
  ASSERT_TRUE(engine->Submit(bad, bc.Sink()).ok());
  bc.Wait();
  EXPECT_EQ(bc.result().finish, Finish::kError);
  EXPECT_EQ(bc.result().tokens.size(), 1u);
  EXPECT_NE(bc.Final().error.message().find("no token of the vocabulary can continue"),
            std::string::npos)
      << bc.Final().error;
  // The same greedy request alone gives the same document (the mask changes no batch rule).
  const testing_util::Result alone = testing_util::Run(*engine, [&] {
    GenerateRequest r = requests[0];
    r.constraint = r.constraint->Fresh();
    return r;
  }());
  EXPECT_EQ(alone.tokens, cs[0]->result().tokens);
}

// A thinking budget (structured::ThinkingBudget, no inner constraint) over the same byte
// vocabulary: Free() until its budget, so the request is sampled as one without a constraint
// (pre-sampled, greedy and drawn alike: the same tokens and top logprobs as without it), and
// advanced past each token; at the budget the close's tokens are forced, then sampling goes on.
TEST_P(ConstrainedOnDevice, ThinkingBudgetIsFreeUntilItForcesTheClose) {
  auto engine = Make();
  ASSERT_TRUE(engine != nullptr);
  auto bytes =
      std::make_shared<const structured::ThinkingBudget::ByteTable>(ByteVocabulary(*engine));
  structured::ThinkingBudgetSpec spec;
  spec.budget = 5;
  spec.starts_inside = true;
  for (const char c : spec.close) spec.close_ids.push_back(c - 32);
  for (const bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    GenerateRequest r = Greedy(testing_util::Prompt(10, 77), 16);
    r.sampling.logprobs = 2;
    if (sampled) {
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 5;
    }
    const testing_util::Result free = testing_util::Run(*engine, r);
    r.constraint = std::make_shared<structured::ThinkingBudget>(spec, bytes, nullptr);
    const testing_util::Result cut = testing_util::Run(*engine, r);
    ASSERT_EQ(free.tokens.size(), 16u);
    ASSERT_EQ(cut.tokens.size(), 16u);
    std::string text;
    for (int i = 0; i < 5; ++i) text.push_back(static_cast<char>(32 + free.tokens[i]));
    ASSERT_EQ(text.find("</think>"), std::string::npos) << "the model closed it by itself";
    EXPECT_EQ(std::vector<int32_t>(cut.tokens.begin(), cut.tokens.begin() + 5),
              std::vector<int32_t>(free.tokens.begin(), free.tokens.begin() + 5));
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(cut.top[i].size(), free.top[i].size()) << i;
      for (size_t k = 0; k < cut.top[i].size(); ++k) {
        EXPECT_EQ(cut.top[i][k].first, free.top[i][k].first) << i;
        EXPECT_NEAR(cut.top[i][k].second, free.top[i][k].second, 1e-5) << i;
      }
    }
    EXPECT_EQ(std::vector<int32_t>(cut.tokens.begin() + 5, cut.tokens.begin() + 13),
              spec.close_ids);
  }
  // The forced close comes whatever else restricts the request (a bad word, a −∞ bias, the
  // allowed ids), and a forced stop token ends the output as a sampled one does.
  GenerateRequest r = Greedy(testing_util::Prompt(10, 77), 16);
  r.sampling.bad_words_ids = {{spec.close_ids[0]}};
  r.sampling.logit_bias[spec.close_ids[1]] = -std::numeric_limits<float>::infinity();
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < 95; ++t) {
    if (std::find(spec.close_ids.begin(), spec.close_ids.end(), t) == spec.close_ids.end()) {
      allowed.push_back(t);
    }
  }
  r.sampling.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(allowed);
  r.constraint = std::make_shared<structured::ThinkingBudget>(spec, bytes, nullptr);
  const testing_util::Result forced = testing_util::Run(*engine, r);
  ASSERT_EQ(forced.tokens.size(), 16u);
  EXPECT_EQ(std::vector<int32_t>(forced.tokens.begin() + 5, forced.tokens.begin() + 13),
            spec.close_ids);
  for (size_t i = 0; i < forced.tokens.size(); ++i) {
    if (i >= 5 && i < 13) continue;
    EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), forced.tokens[i])) << i;
  }
  r.stop.stop_token_ids = {spec.close_ids[2]};
  r.constraint = std::make_shared<structured::ThinkingBudget>(spec, bytes, nullptr);
  const testing_util::Result stopped = testing_util::Run(*engine, r);
  EXPECT_EQ(stopped.finish, Finish::kStop);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(forced.tokens.begin(), forced.tokens.begin() + 8));
}

INSTANTIATE_TEST_SUITE_P(Devices, ConstrainedOnDevice,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
