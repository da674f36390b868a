// Fuzz target: structured output. The input is a JSON Schema, a NUL byte, then output bytes. The
// schema goes through CompileJsonSchema (errors must have messages); a compiled grammar's matcher
// takes the output bytes until it refuses one. Invariants: every prefix the matcher calls complete
// parses as JSON (nlohmann, a separate parser); the token masks of a small vocabulary agree with
// Allows, and every allowed token can be advanced past.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using linfer::fuzz::Require;
using namespace linfer::structured;  // NOLINT: a harness

std::shared_ptr<const TokenIndex> Vocabulary() {
  static const std::shared_ptr<const TokenIndex> index = [] {
    std::vector<std::optional<std::string>> v;
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece : {"{\"", "\":", "\", \"", "true", "null", "\xC3\xA9", "\\u00", "12",
                              "e+", "  ", "\"}", "],", "\\\"", "\xF0\x9F\x98"}) {
      v.push_back(std::string(piece));
    }
    return std::make_shared<const TokenIndex>(std::move(v));
  }();
  return index;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const absl::string_view schema_text = in.substr(0, nul);
  const absl::string_view output = nul == absl::string_view::npos ? "" : in.substr(nul + 1);
  if (schema_text.size() > 4096) return 0;
  const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
  std::shared_ptr<const Grammar> grammar;
  if (!schema.is_discarded()) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema, "schema");
    if (!g.ok()) {
      Require(!g.status().message().empty(), "a schema error without a message");
      return 0;
    }
    grammar = *g;
  } else {
    grammar = JsonObjectGrammar();
  }
  JsonMatcher m(grammar.get());
  JsonConstraint c(grammar, Vocabulary());
  const int64_t vocab = Vocabulary()->vocab();
  std::vector<uint64_t> mask(static_cast<size_t>((vocab + 63) / 64));
  std::string fed;
  for (size_t i = 0; i < output.size() && i < 2048; ++i) {
    const auto b = static_cast<uint8_t>(output[i]);
    if (!m.Feed(b)) break;
    fed.push_back(static_cast<char>(b));
    Require(c.Advance(b).ok(), "the constraint refuses a byte token its matcher takes");
    if (m.Complete()) {
      Require(!nlohmann::ordered_json::parse(fed, nullptr, false).is_discarded(),
              "a complete document that is not JSON");
    }
    if (i % 16 == 0) {
      std::fill(mask.begin(), mask.end(), 0);
      c.FillAllowed(absl::MakeSpan(mask));
      for (int32_t t = 0; t < vocab; ++t) {
        const bool bit = (mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1;
        Require(bit == c.Allows(t), "a mask bit disagrees with Allows");
      }
    }
  }
  return 0;
}
