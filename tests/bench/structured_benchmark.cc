// Structured output's host cost per sampled token: JsonConstraint::FillAllowed (the token mask) at
// typical points of a document, next to Sampler::Sample of the same whole row measured in the same
// run (what a constrained row costs anyway: it comes back whole). The vocabulary: GPT-NeoX's
// 50,254 tokens (../shared/fixtures), and the same bytes repeated to 251,270 ids (about Qwen3.5's
// 248,320; repeats share trie nodes, so the walk there is the 50k one's, and the plain tokens'
// pass is the full size's). `mask_of_sample`: the mask's time over the sample's (temperature 1
// over the whole row). `think/…`: the same schema after a reasoning block (text_grammar.h
// AfterReasoning; the grammar of a forced call or a format with thinking on): inside the
// reasoning's raw text, where tokens without '<' pass by the shortcut, and at the document's
// start after it. `in_pattern` / `in_free_pattern`: inside strings with a pattern (their DFA
// prunes the walk; no shortcut), `regex/…`: a whole-output regex (vLLM's regex: kRegex).
//   build/tests/bench/structured_benchmark [--benchmark_filter=...]
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampler.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/text_grammar.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::structured {
namespace {

constexpr const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}},
  "pet":{"anyOf":[{"type":"null"},{"enum":["cat","dog"]}]},
  "code":{"type":"string","pattern":"^[A-Z]{3}-\\d+$"},
  "note":{"type":"string","pattern":"^[^<>]*$"}},
  "required":["name","age"]})";
constexpr const char* kRegex = "(yes|no)\\. [^\\n]*\\n";

// Document prefixes: inside a free string, before a key, a number's start and middle, an enum.
const std::vector<std::pair<const char*, const char*>> kPoints = {
    {"in_string", R"({"name":"Ada Lo)"},
    {"before_key", R"({)"},
    {"after_colon", R"({"name":"x","age":)"},
    {"in_number", R"({"name":"x","age":12)"},
    {"in_enum", R"({"name":"x","age":1,"pet":"c)"},
    {"think/in_reasoning", "So the user wants a name. Let me"},
    {"think/after_reasoning", "Done.\n</think>\n\n{"},
    {"in_pattern", R"({"name":"x","age":1,"code":"AB)"},
    {"in_free_pattern", R"({"name":"x","age":1,"note":"Some text)"},
    {"regex/free", "yes. Some text"}};

std::shared_ptr<const TokenIndex> Index(int repeats) {
  static const std::vector<std::optional<std::string>>* table = [] {
    auto* t = new std::vector<std::optional<std::string>>();
    const char* path = LINFER_NEOX_JSON;
    if (!std::filesystem::exists(path)) return t;
    auto tok = tokenizer::Tokenizer::FromFile(path);
    if (tok.ok()) *t = (*tok)->TokenByteTable(50254);
    return t;
  }();
  std::vector<std::optional<std::string>> bytes;
  for (int r = 0; r < repeats; ++r) bytes.insert(bytes.end(), table->begin(), table->end());
  return std::make_shared<const TokenIndex>(std::move(bytes));
}

double SampleSeconds(int64_t vocab) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = normal(gen);
  SamplingParams p;
  p.seed = 1;
  Sampler s(p);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kReps = 50;
  for (int i = 0; i < kReps; ++i) benchmark::DoNotOptimize(s.Sample(x, {}, {}));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kReps;
}

void BM_Mask(benchmark::State& state, int repeats, const std::string& name, const char* prefix) {
  auto index = Index(repeats);
  if (index->vocab() == 0) {
    state.SkipWithError("../shared/fixtures/tokenizers/gpt-neox-20b.tokenizer.json is absent");
    return;
  }
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar =
      CompileJsonSchema(nlohmann::ordered_json::parse(kSchema), "schema");
  if (name.rfind("think/", 0) == 0) grammar = AfterReasoning(**grammar);
  if (name.rfind("regex/", 0) == 0) grammar = RegexGrammar(kRegex, "regex");
  JsonConstraint c(*grammar, index);
  JsonMatcher m(grammar->get());
  for (const char* p = prefix; *p; ++p) {
    // Feed the prefix byte by byte through single-byte tokens (GPT-NeoX has all 256).
    if (!m.Feed(static_cast<uint8_t>(*p))) state.SkipWithError("bad prefix");
  }
  // The constraint's own matcher: advance by the byte tokens of the prefix.
  for (const char* p = prefix; *p; ++p) {
    for (int32_t id = 0; id < index->vocab(); ++id) {
      if (index->usable(id) && index->bytes(id) == std::string(1, *p)) {
        if (!c.Advance(id).ok()) state.SkipWithError("prefix token refused");
        break;
      }
    }
  }
  std::vector<uint64_t> mask(static_cast<size_t>((index->vocab() + 63) / 64));
  int64_t allowed = 0, masks = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    std::fill(mask.begin(), mask.end(), 0);
    c.FillAllowed(absl::MakeSpan(mask));
    benchmark::ClobberMemory();
    ++masks;
  }
  const double per_mask =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
      static_cast<double>(std::max<int64_t>(masks, 1));
  for (uint64_t w : mask) allowed += __builtin_popcountll(w);
  const double sample = SampleSeconds(index->vocab());
  state.counters["vocab"] = static_cast<double>(index->vocab());
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["sample_us"] = sample * 1e6;
  state.counters["mask_of_sample"] = per_mask / sample;
}

void Register() {
  for (int repeats : {1, 5}) {
    for (const auto& [name, prefix] : kPoints) {
      benchmark::RegisterBenchmark(
          (std::string("Mask/") + name + "/vocab:" + std::to_string(50254 * repeats)).c_str(),
          [repeats, name = std::string(name), prefix = prefix](benchmark::State& s) {
            BM_Mask(s, repeats, name, prefix);
          })
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace linfer::structured

int main(int argc, char** argv) {
  linfer::structured::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
