// Fuzz target: structured output's regular expressions. The input is a flags byte, a pattern, a
// NUL byte, then text. Flags: bit 0 Python's syntax (else ECMA-262), bit 1 a search, bit 2 a JSON
// string's text, bits 3-5 minLength 0-7, bits 6-7 maxLength none / 3 / 9 / 40. The pattern goes
// through CompileRegex (errors must have messages); the text steps the DFA until it refuses a
// byte. Invariants: from every state reached, a match can still be completed (a search of the
// DFA within the lengths); every text the DFA may end on is valid UTF-8 of the bounds' length;
// RegexGrammar's token masks agree with Allows.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/regex_dfa.h"
#include "models/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using linfer::fuzz::Require;
using namespace linfer::structured;  // NOLINT: a harness

// Whether some continuation from (state, chars) ends as a match: breadth first over (state,
// characters), the characters capped past the bounds' reach.
bool Completable(const RegexDfa& d, int32_t state, int64_t chars, int64_t cap) {
  std::set<std::pair<int32_t, int64_t>> seen = {{state, chars}};
  std::deque<std::pair<int32_t, int64_t>> queue = {{state, chars}};
  while (!queue.empty()) {
    auto [s, n] = queue.front();
    queue.pop_front();
    if (d.MayEnd(s, n)) return true;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = d.Next(s, static_cast<uint8_t>(b));
      if (t < 0) continue;
      const int64_t m = std::min(cap, n + ((b & 0xC0) != 0x80 ? 1 : 0));
      if (m > d.max_chars) continue;
      if (seen.insert({t, m}).second) queue.push_back({t, m});
    }
    if (seen.size() > 200000) return true;  // too large to decide here
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 2048) return 0;
  const uint8_t flags = data[0];
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = in.find('\0');
  const absl::string_view pattern = in.substr(0, nul);
  const absl::string_view text = nul == absl::string_view::npos ? "" : in.substr(nul + 1);
  RegexOptions o;
  o.flavor = (flags & 1) ? RegexFlavor::kPython : RegexFlavor::kEcma;
  o.search = (flags & 2) != 0;
  o.json_string = (flags & 4) != 0;
  o.min_chars = (flags >> 3) & 7;
  static const int64_t kMax[] = {std::numeric_limits<int64_t>::max(), 3, 9, 40};
  o.max_chars = kMax[flags >> 6];
  absl::StatusOr<RegexDfa> d = CompileRegex(pattern, o, "p");
  if (!d.ok()) {
    Require(!d.status().message().empty(), "a regex error without a message");
    return 0;
  }
  const int64_t cap = std::max<int64_t>(o.min_chars, o.max_chars == kMax[0] ? 0 : o.max_chars) + 1;
  int32_t s = d->start;
  int64_t chars = 0;
  Require(Completable(*d, s, 0, cap), "the start cannot complete a match");
  std::string fed;
  for (size_t i = 0; i < text.size() && i < 256; ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const int32_t t = d->Next(s, b);
    const int64_t n = chars + ((b & 0xC0) != 0x80 ? 1 : 0);
    if (t < 0 || !d->Fits(t, n)) break;
    s = t;
    chars = n;
    fed.push_back(static_cast<char>(b));
    Require(Completable(*d, s, chars, cap), "a state the DFA keeps cannot complete a match");
    if (d->MayEnd(s, chars)) {
      Require(linfer::tokenizer::ValidateUtf8(fed).ok(), "a match that is not valid UTF-8");
      Require(chars >= o.min_chars && chars <= o.max_chars, "a match outside its lengths");
      if (o.json_string) {
        for (unsigned char c : fed) {
          Require(c >= 0x20 || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t',
                  "a JSON string's match with a control character it cannot write");
        }
      }
    }
  }
  // The whole-output grammar (Python's syntax): masks agree with Allows along the text.
  if (o.flavor == RegexFlavor::kPython && !o.search && !o.json_string && o.min_chars == 0 &&
      o.max_chars == kMax[0]) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = RegexGrammar(pattern, "regex");
    Require(g.ok(), "RegexGrammar refuses what CompileRegex took");
    static const std::shared_ptr<const TokenIndex> index = [] {
      std::vector<std::optional<std::string>> v;
      for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
      for (const char* piece : {"ab", "\xC3\xA9", "12", "  ", "a\n", "\xF0\x9F\x98"}) {
        v.push_back(std::string(piece));
      }
      return std::make_shared<const TokenIndex>(std::move(v));
    }();
    JsonConstraint c(*g, index);
    std::vector<uint64_t> mask(static_cast<size_t>((index->vocab() + 63) / 64));
    for (size_t i = 0; i <= fed.size(); ++i) {
      std::fill(mask.begin(), mask.end(), 0);
      c.FillAllowed(absl::MakeSpan(mask));
      for (int32_t t = 0; t < index->vocab(); ++t) {
        const bool bit = (mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1;
        Require(bit == c.Allows(t), "a mask bit disagrees with Allows");
      }
      if (i < fed.size()) {
        Require(c.Advance(static_cast<uint8_t>(fed[i])).ok(), "the grammar refuses a DFA byte");
      }
    }
  }
  return 0;
}
