// The text-grammar builders: graph surgery on Grammar (json_grammar.h), checked where a request's
// data (tool names, enum members) becomes a tag.
#include "engine/structured/text_grammar.h"

#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace linfer::structured {

int32_t Graft(Grammar& into, const Grammar& from) {
  const auto node_base = static_cast<int32_t>(into.nodes.size());
  const auto trie_base = static_cast<int32_t>(into.tries.size());
  const auto regex_base = static_cast<int32_t>(into.regexes.size());
  auto node = [&](int32_t n) { return n < 0 ? n : n + node_base; };
  for (Node n : from.nodes) {
    n.value = node(n.value);
    if (n.literals >= 0) n.literals += trie_base;
    if (n.regex >= 0) n.regex += regex_base;
    for (int32_t& p : n.properties) p = node(p);
    for (int32_t& d : n.dispatch) d = node(d);
    into.nodes.push_back(std::move(n));
  }
  into.tries.insert(into.tries.end(), from.tries.begin(), from.tries.end());
  into.regexes.insert(into.regexes.end(), from.regexes.begin(), from.regexes.end());
  return node(from.root);
}

namespace {

// A node of `kind` whose trie holds the one text.
int32_t AddOneText(Grammar& g, Node::Kind kind, absl::string_view text) {
  LiteralTrie trie;
  trie.Add(text, 0);
  g.tries.push_back(std::move(trie));
  Node n;
  n.kind = kind;
  n.literals = static_cast<int32_t>(g.tries.size()) - 1;
  g.nodes.push_back(std::move(n));
  return static_cast<int32_t>(g.nodes.size()) - 1;
}

}  // namespace

int32_t AddText(Grammar& g, absl::string_view text) {
  return AddOneText(g, Node::Kind::kLiterals, text);
}

int32_t AddSequence(Grammar& g, std::vector<int32_t> parts) {
  Node n;
  n.kind = Node::Kind::kSequence;
  n.properties = std::move(parts);
  g.nodes.push_back(std::move(n));
  return static_cast<int32_t>(g.nodes.size()) - 1;
}

absl::StatusOr<int32_t> AddTagged(Grammar& g,
                                  const std::vector<std::pair<std::string, int32_t>>& tags,
                                  bool optional, absl::string_view where) {
  LiteralTrie trie;
  Node n;
  n.kind = Node::Kind::kTagged;
  n.min = optional ? 0 : 1;
  for (size_t i = 0; i < tags.size(); ++i) {
    if (tags[i].first.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": an empty tag"));
    trie.Add(tags[i].first, static_cast<int32_t>(i));
    n.properties.push_back(tags[i].second);
  }
  for (size_t i = 0; i < tags.size(); ++i) {  // prefix-free: each tag ends at a leaf of its own
    int32_t at = 0;
    for (const char c : tags[i].first) at = trie.Child(at, static_cast<uint8_t>(c));
    if (trie.nodes[at].terminal != static_cast<int32_t>(i) || !trie.nodes[at].next.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"", absl::CHexEscape(tags[i].first), "\" ",
                       trie.nodes[at].terminal != static_cast<int32_t>(i)
                           ? "comes twice"
                           : "is the start of another alternative"));
    }
  }
  g.tries.push_back(std::move(trie));
  n.literals = static_cast<int32_t>(g.tries.size()) - 1;
  g.nodes.push_back(std::move(n));
  return static_cast<int32_t>(g.nodes.size()) - 1;
}

absl::StatusOr<int32_t> AddRawText(Grammar& g, absl::string_view terminator) {
  if (terminator.empty() || terminator[0] != '<') {
    return absl::InvalidArgumentError("raw text: the terminator must start with '<'");
  }
  for (const char c : terminator) {
    const auto b = static_cast<uint8_t>(c);
    if (b < 0x20 || b >= 0x7F) {
      return absl::InvalidArgumentError("raw text: the terminator must be printable ASCII");
    }
  }
  return AddOneText(g, Node::Kind::kRawText, terminator);
}

std::shared_ptr<const Grammar> AfterReasoning(const Grammar& from) {
  auto g = std::make_shared<Grammar>();
  g->max_whitespace_run = from.max_whitespace_run;
  g->no_close_tags = from.no_close_tags;
  const int32_t body = Graft(*g, from);
  const int32_t reasoning = *AddRawText(*g, "</think>");  // a valid terminator
  const int32_t gap = AddText(*g, "\n\n");
  g->root = AddSequence(*g, {reasoning, gap, body});
  ComputeMinDepths(*g);
  return g;
}

}  // namespace linfer::structured
