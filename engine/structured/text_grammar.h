// Grammars of text around JSON values: what a chat template's model writes around a tool call's
// arguments ("<tool_call>\n{\"name\": \"f\", \"arguments\": " … "}\n</tool_call>", or Qwen3.5's
// XML with raw-text parameter values), built from fixed texts, sequences, tagged alternatives,
// raw text and grafted JSON Schema grammars (json_grammar.h's kSequence, kTagged, kRawText).
//
// The builders append nodes to a Grammar and return their index; followers may be set after a
// node is made (g.nodes[i].properties[j] = …), so chains may loop (one call, then another). Call
// ComputeMinDepths(g) and set g.root once the graph is complete.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/structured/json_grammar.h"

namespace linfer::structured {

// Appends a copy of `from` (its nodes and tries) to `into`; returns the node of from's root.
int32_t Graft(Grammar& into, const Grammar& from);

// A fixed non-empty text.
int32_t AddText(Grammar& g, absl::string_view text);

// `parts` one after the other, nothing between them.
int32_t AddSequence(Grammar& g, std::vector<int32_t> parts);

// One of the tags, each followed by its node (-1: nothing follows); `optional`: the value may also
// be empty (when the next byte starts no tag). InvalidArgument naming `where` when a tag is empty
// or repeats or is the start of another (the matcher decides a tag by its bytes alone).
absl::StatusOr<int32_t> AddTagged(Grammar& g,
                                  const std::vector<std::pair<std::string, int32_t>>& tags,
                                  bool optional, absl::string_view where);

// Free text ended by the first occurrence of `terminator` (taken with it). InvalidArgument unless
// the terminator is ASCII without control bytes and starts with '<' (so that the constraint's
// shortcut for tokens without '<' holds).
absl::StatusOr<int32_t> AddRawText(Grammar& g, absl::string_view terminator);

// `g` after a reasoning block the prompt opened: raw text up to "</think>", "\n\n", then g's root.
std::shared_ptr<const Grammar> AfterReasoning(const Grammar& g);

}  // namespace linfer::structured
