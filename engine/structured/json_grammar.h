// Structured output's grammar: a JSON Schema (or OpenAI's "json_object") compiled into a graph
// of value nodes that a byte-level pushdown matcher (json_matcher.h) walks deterministically.
//
// The language generated is a SUBSET of the documents the schema accepts, chosen so that one byte
// of lookahead always decides what comes next (as xgrammar's strict mode):
//   - an object's properties come in the schema's order, required ones always, optional ones
//     when the output chooses; no other keys (additionalProperties is honoured only for objects
//     without `properties`, as maps);
//   - anyOf / oneOf / a list of types: alternatives must start with different bytes (a string and
//     a null, an object and an array, ...);
//   - whitespace between tokens in runs of at most kMaxWhitespaceRun; none before or after the
//     top value;
//   - numbers: at most kMaxIntegerDigits digits before the point, kMaxFractionDigits after it,
//     kMaxExponentDigits in the exponent;
//   - objects and arrays nest at most kMaxNesting deep.
//   - minimum / maximum / exclusiveMinimum / exclusiveMaximum: a digit comes only while a value
//     within them can still be written (numbers: no exponent, within ±2^53; a decimal is within
//     when the double a reader makes of it is, so minimum 0.1 admits "0.1"); an integer beside a
//     number in a union goes only when the number's bounds hold all its integers;
//   - pattern and format (date-time, date, time, duration, email, hostname, ipv4, ipv6, uuid:
//     string_formats.h): a string's characters step a DFA (regex_dfa.h) and it closes only where
//     the DFA accepts, within minLength / maxLength; its characters are written without \u
//     escapes.
// Every document of that subset validates against the schema. Keywords that would need more
// (multipleOf, allOf of several schemas, ...) are refused by name, never ignored; pure
// annotations (title, description, default, examples, other formats, ...) are ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/structured/regex_dfa.h"
#include "nlohmann/json.hpp"

namespace linfer::structured {

inline constexpr int kMaxWhitespaceRun = 20;
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int64_t kMaxIntegerMagnitude = 9'999'999'999'999'999;  // 16 nines
inline constexpr int kMaxFractionDigits = 16;
// A bounded number's value in units of 10^-kMaxFractionDigits: exact for every number the matcher
// writes there (16 digits each side of the point: below 10^32 units).
using NumberUnits = __int128;
inline constexpr NumberUnits kUnitsPerOne = NumberUnits{10'000'000'000'000'000};  // 10^16
inline constexpr NumberUnits kMaxNumberUnits = kUnitsPerOne * kUnitsPerOne - 1;
// What a bounded number writes stays within ±2^53 (where every integer is a double).
inline constexpr NumberUnits kMaxExactNumberUnits = (NumberUnits{1} << 53) * kUnitsPerOne;
inline constexpr int kMaxExponentDigits = 2;  // ≤ e±99: every parser gets a finite double
inline constexpr int kMaxNesting = 32;
// Bounds on what one request's schema may compile into.
inline constexpr size_t kMaxNodes = 10000;
// A trie keeps ≈ 130 bytes a literal byte (a node with two vectors): 256 KiB of literals ≈ 32 MB
// for the life of the request (1 MiB was ≈ 128 MB, times every queued request).
inline constexpr size_t kMaxLiteralBytes = 256 << 10;
// Patterns and formats (regex_dfa.h): how many one schema may have, and the memory of their DFAs.
inline constexpr size_t kMaxRegexes = 256;
inline constexpr int64_t kMaxRegexBytesPerSchema = int64_t{32} << 20;
// Their compiles' steps together (RegexOptions::max_work): ≈ 0.4 s of a core at most.
inline constexpr int64_t kMaxSchemaRegexWork = int64_t{1} << 25;
inline constexpr int kMaxSchemaTextDepth = 64;  // a schema sent as text, as request bodies
inline constexpr int kMaxSchemaNesting = 128;   // schemas within schemas, $refs followed included

// Byte strings (serialized JSON values: enum members, property keys with their quotes) as a trie.
struct LiteralTrie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // (byte, child), sorted by byte
    int32_t terminal = -1;                          // the literal ending here, or -1
    std::vector<int32_t> below;                     // literals ending here or deeper, sorted
  };
  std::vector<Node> nodes = std::vector<Node>(1);  // nodes[0]: the root
  std::vector<std::string> texts;                  // every literal added, in order

  // The child of `node` by byte `b`, or -1.
  int32_t Child(int32_t node, uint8_t b) const;
  // Whether some literal in [lo, hi] ends at or below `node`.
  bool Reaches(int32_t node, int32_t lo, int32_t hi) const;
  void Add(absl::string_view text, int32_t index);
};

struct Node {
  enum class Kind : uint8_t {
    kObject,    // `{` keys of `keys` (in order) `}`
    kMap,       // `{` free string keys, each with a `value` `}`
    kArray,     // `[` items of `value`, between min and max of them `]`
    kString,    // a string of min..max characters (code points; an escape counts one); with a
                // regex, one its DFA takes (JSON Schema's pattern / format), written without \u
                // escapes
    kNumber,    // a JSON number (integer: no fraction or exponent)
    kLiterals,  // one of the serialized values in tries[literals]
    kUnion,     // the alternative whose first byte matches (dispatch)
    // Text around JSON (text_grammar.h; never inside a JSON value, never in a union):
    kSequence,  // properties' nodes one after the other, nothing between them
    kTagged,    // one of the tags in tries[literals] (prefix-free), then node properties[tag]
                // (-1: nothing); min 0: may also be empty (no tag at all)
    kRawText,   // free UTF-8 text (no control bytes but \t \n \r) ended by the first occurrence
                // of tries[literals].texts[0] (ASCII, starting with '<'), which it takes; of
                // min..max characters, one final newline not counted (a template's newline
                // before a closing tag, which readers strip)
    kRegex,     // raw text the whole of which regexes[regex] matches (vLLM's regex output; only
                // as the root)
  };
  Kind kind = Kind::kLiterals;
  bool integer = false;  // kNumber
  // kNumber: minimum, maximum, exclusiveMinimum, exclusiveMaximum. An integer's value lies in
  // [min, max] (within ±kMaxIntegerMagnitude; never "-0"); a number's, in units of
  // 10^-kMaxFractionDigits, in [min_units, max_units] (no exponent then).
  bool bounded = false;
  NumberUnits min_units = 0, max_units = 0;
  // The fewest objects and arrays a value of this node must open, one inside the next
  // (kMaxNesting + 1: more than the matcher allows, or no finite value); a literal counts 0 (the
  // matcher reads it as bytes). A value may start only where its open ones plus this fit under
  // kMaxNesting, so that the output never reaches a point it cannot finish from.
  int32_t min_depth = 0;
  int32_t max_key_depth = 0;     // kObject: the largest min_depth of its keys' values
  int32_t value = -1;            // kMap: values; kArray: items
  int32_t regex = -1;            // kString (-1: none), kRegex: an index into Grammar::regexes
  bool regex_is_format = false;  // kString: the regex is a `format`'s (an annotation elsewhere)
  int64_t min = 0;               // kArray: items; kString, kRawText: characters; bounded kNumber
  int64_t max = std::numeric_limits<int64_t>::max();
  int32_t literals = -1;               // kLiterals: a trie; kObject: its keys' trie; kTagged:
                                       // its tags; kRawText: its terminator
  std::vector<int32_t> properties;     // kObject: the value node of each key, in order;
                                       // kSequence: its parts; kTagged: each tag's follower
  std::vector<bool> required;          // kObject: per key
  std::vector<int32_t> next_required;  // kObject: [keys + 1], the first required key ≥ i
  std::vector<int32_t> dispatch;       // kUnion: [256] first byte -> node, or -1
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<LiteralTrie> tries;
  std::vector<std::shared_ptr<const RegexDfa>> regexes;  // (immutable: copies share them)
  int32_t root = -1;
  // A node for any JSON value (json_object's values), created on first use.
  int32_t any = -1;
  // The longest run of whitespace between tokens: kMaxWhitespaceRun, or 0 for compact output
  // (vLLM's disable_any_whitespace).
  int max_whitespace_run = kMaxWhitespaceRun;
  // No "</" in strings (a '/' right after a '<' must be escaped, "<\/"): JSON inside markup whose
  // reader cuts at its closing tag (a forced tool call's arguments).
  bool no_close_tags = false;
  // The automaton steps its patterns and formats took to compile (RegexOptions::max_work), so that
  // several schemas compiled for one request can share one budget (RegexBudget).
  int64_t regex_work = 0;
};

// The most memory the grammars of requests in flight may take together (GrammarMemoryBytes,
// process-wide): distinct large schemas (≈ 32 MB each at kMaxLiteralBytes) times every running
// and queued request would otherwise have no bound short of the machine's memory.
inline constexpr int64_t kMaxLiveGrammarBytes = int64_t{1} << 30;

// About the heap memory `g` takes (its nodes, tries and literal texts, with the allocator's
// overhead per block).
int64_t GrammarMemoryBytes(const Grammar& g);

// `g`, counted among the grammars alive until its last holder lets it go; ResourceExhausted
// naming `where` when that would take the grammars alive past kMaxLiveGrammarBytes (retry when
// requests in flight have finished). Every grammar a request builds goes through it.
absl::StatusOr<std::shared_ptr<const Grammar>> CountLive(std::shared_ptr<const Grammar> g,
                                                         absl::string_view where);
// The memory of the grammars alive now (CountLive's).
int64_t LiveGrammarBytes();
// The budget CountLive holds them to: kMaxLiveGrammarBytes unless set (tests lower it).
void SetLiveGrammarBudget(int64_t bytes);

// Grammars compiled from the same text (a schema's JSON, a request's tools) while a request still
// holds one: one copy in memory and one compile for all of them (a hundred requests with the
// same 8,000-member enum held a hundred tries of ≈ 24 MB), requests that arrive while it compiles
// included (they wait for it). Entries are weak: a grammar lives as long as its requests.
// Thread-safe.
class LiveGrammars {
 public:
  using Compiled = absl::StatusOr<std::shared_ptr<const Grammar>>;
  // The live grammar of `key`, else `compile()`'s, compiled once for every caller that asks while
  // it runs. A failed compile is each caller's own (run again, so that its error names its own
  // fields).
  Compiled GetOrCompile(const std::string& key, const std::function<Compiled()>& compile)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    bool done = false;
    std::shared_ptr<const Grammar> grammar;  // null: the compile failed
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<const Grammar>> live_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Pending>> compiling_ ABSL_GUARDED_BY(mu_);
};

// `g` with whitespace between tokens off (compact documents): a counted copy (CountLive).
absl::StatusOr<std::shared_ptr<const Grammar>> WithoutWhitespace(std::shared_ptr<const Grammar> g,
                                                                 absl::string_view where);

// vLLM's `regex` output: raw text that the pattern (Python's syntax) matches whole.
// InvalidArgument naming `where` (CompileRegex).
absl::StatusOr<std::shared_ptr<const Grammar>> RegexGrammar(absl::string_view pattern,
                                                            absl::string_view where);

// OpenAI's `{"type": "json_object"}`: any JSON object.
std::shared_ptr<const Grammar> JsonObjectGrammar();

// vLLM's `choice`: the output is exactly one of `choices` (raw text, not JSON). InvalidArgument
// naming `where`[i] for an empty choice.
absl::StatusOr<std::shared_ptr<const Grammar>> ChoiceGrammar(
    const std::vector<std::string>& choices, absl::string_view where);

// A schema given as JSON text (vLLM's guided_json string, gRPC's json_schema): InvalidArgument
// naming `where` when it nests deeper than kMaxSchemaTextDepth (checked before parsing) or is not
// JSON; then as CompileJsonSchema.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchemaText(absl::string_view text,
                                                                     absl::string_view where);

// Fills every node's min_depth and max_key_depth (after the graph is complete).
void ComputeMinDepths(Grammar& g);

// What a schema's patterns and formats may take to compile: the steps (Grammar::regex_work) and
// the memory of their DFAs. A request that compiles several schemas (a call forced among many
// tools) passes what the earlier ones left, and `what` names them all in the error.
struct RegexBudget {
  int64_t work = kMaxSchemaRegexWork;
  int64_t bytes = kMaxRegexBytesPerSchema;
  absl::string_view what = "the schema's patterns";
};

// The memory of `g`'s DFAs (what RegexBudget::bytes bounds).
int64_t RegexBytes(const Grammar& g);
// The errors of a budget spent: its steps, its bytes ("the schema's patterns take too long to
// compile (more than … automaton steps)").
std::string RegexWorkSpent(const RegexBudget& budget);
std::string RegexBytesSpent(const RegexBudget& budget);
// Takes what `g`'s patterns took from `budget`: InvalidArgument naming `where` when that is more
// than it had left.
absl::Status ChargeRegexBudget(const Grammar& g, absl::string_view where, RegexBudget& budget);

// Compiles a JSON Schema (json_schema.cc). Errors are InvalidArgument naming the place in the
// schema, e.g. "schema.properties.age.minimum: not supported (structured output cannot enforce
// it)". `where` prefixes the paths ("response_format.json_schema.schema"). A live grammar of the
// same schema is shared whatever budget compiled it: a caller sharing a budget checks
// regex_work and RegexBytes of what it gets.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    const nlohmann::ordered_json& schema, absl::string_view where, const RegexBudget& budget = {});

// The bytes a node's value can start with (whitespace excluded).
std::vector<bool> FirstBytes(const Grammar& g, int32_t node);

}  // namespace linfer::structured
