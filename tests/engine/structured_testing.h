// Helpers of the structured-output tests: compiling a schema (or its error), feeding a document
// to the matcher, and random documents of a grammar.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"

namespace linfer::structured {

using Json = nlohmann::ordered_json;

inline std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      CompileJsonSchema(Json::parse(schema), "schema");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

inline std::string CompileError(const std::string& schema) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      CompileJsonSchema(Json::parse(schema), "schema");
  return g.ok() ? "ok" : std::string(g.status().message());
}

inline bool Accepts(const Grammar& g, const std::string& doc, bool complete = true) {
  JsonMatcher m(&g);
  return m.FeedBytes(doc) && m.Complete() == complete;
}

// A random document of the grammar, byte by byte: a uniform choice among the bytes the matcher
// takes, leaning on ASCII punctuation (closing things) as the text grows; "" when it does not end
// within `limit` bytes.
inline std::string RandomDocument(const Grammar& g, std::mt19937& rng, size_t limit = 600) {
  JsonMatcher m(&g);
  std::string out;
  while (out.size() < limit) {
    std::vector<uint8_t> ok, punct;
    for (int b = 0; b < 256; ++b) {
      JsonMatcher t = m;
      if (!t.Feed(static_cast<uint8_t>(b))) continue;
      ok.push_back(static_cast<uint8_t>(b));
      if (std::ispunct(b)) punct.push_back(static_cast<uint8_t>(b));
    }
    if (m.Complete() && (ok.empty() || rng() % 4 == 0)) return out;
    if (ok.empty()) {
      ADD_FAILURE() << "stuck after " << out;
      return "";
    }
    const bool close = !punct.empty() && rng() % 1000 < std::min<size_t>(900, 200 + out.size() * 2);
    const std::vector<uint8_t>& from = close ? punct : ok;
    const uint8_t b = from[rng() % from.size()];
    EXPECT_TRUE(m.Feed(b));
    out.push_back(static_cast<char>(b));
  }
  return "";
}

}  // namespace linfer::structured
