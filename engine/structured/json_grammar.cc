// Grammar's pieces that do not depend on a schema: the literal trie, first bytes, the nesting
// each node needs (Node::min_depth), compact and choice grammars. The schema compiler is
// json_schema.cc.
#include "engine/structured/json_grammar.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/heap_bytes.h"

namespace linfer::structured {

int32_t LiteralTrie::Child(int32_t node, uint8_t b) const {
  const auto& next = nodes[node].next;
  auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, INT32_MIN));
  return it != next.end() && it->first == b ? it->second : -1;
}

bool LiteralTrie::Reaches(int32_t node, int32_t lo, int32_t hi) const {
  const std::vector<int32_t>& below = nodes[node].below;
  auto it = std::lower_bound(below.begin(), below.end(), lo);
  return it != below.end() && *it <= hi;
}

void LiteralTrie::Add(absl::string_view text, int32_t index) {
  texts.emplace_back(text);
  int32_t node = 0;
  auto mark = [&](int32_t n) {
    std::vector<int32_t>& below = nodes[n].below;
    below.insert(std::upper_bound(below.begin(), below.end(), index), index);
  };
  mark(0);
  for (const char ch : text) {
    const uint8_t b = static_cast<uint8_t>(ch);
    int32_t child = Child(node, b);
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      auto& next = nodes[node].next;
      next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(b, INT32_MIN)),
                  {b, child});
    }
    node = child;
    mark(node);
  }
  if (nodes[node].terminal < 0) nodes[node].terminal = index;
}

LiveGrammars::Compiled LiveGrammars::GetOrCompile(const std::string& key,
                                                  const std::function<Compiled()>& compile) {
  std::shared_ptr<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = live_.find(key); it != live_.end()) {
      if (std::shared_ptr<const Grammar> g = it->second.lock()) return g;
    }
    std::shared_ptr<Pending>& p = compiling_[key];
    if (p != nullptr) {  // another caller compiles it: wait for its grammar
      pending = p;
      mu_.Await(absl::Condition(&pending->done));
      if (pending->grammar != nullptr) return pending->grammar;
      pending = nullptr;  // its compile failed: this caller's own error below
    } else {
      p = pending = std::make_shared<Pending>();
    }
  }
  // Whatever happens to the compile (an exception unwinding through here too), its waiters wake.
  absl::Cleanup wake = [&] {
    if (pending == nullptr) return;
    absl::MutexLock lock(&mu_);
    pending->done = true;
    compiling_.erase(key);
  };
  Compiled compiled = compile();
  if (pending == nullptr) return compiled;
  absl::MutexLock lock(&mu_);
  if (compiled.ok()) {
    pending->grammar = *compiled;
    // Keys of grammars gone go now (a key is a whole schema's text): a scan of the requests in
    // flight, small beside a compile.
    absl::erase_if(live_, [](const auto& entry) { return entry.second.expired(); });
    live_[key] = *compiled;
  }
  return compiled;
}

// Node::min_depth by fixpoint (from "too deep" down; every step only lowers a value, and values
// are capped at kMaxNesting + 1, so it ends), then max_key_depth. A worklist over the nodes'
// parents: a node is looked at again only when a node it depends on got lower, so the work is
// about (edges × kMaxNesting) whatever the nodes' order (passes over every node until nothing
// changed took one pass per link of a long $ref chain: a 500 KB schema compiled for 30 s).
void ComputeMinDepths(Grammar& g) {
  constexpr int32_t kTooDeep = kMaxNesting + 1;
  const size_t count = g.nodes.size();
  // The nodes each node's value depends on, once each (a union's dispatch repeats them).
  std::vector<std::vector<int32_t>> kids(count);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    std::vector<int32_t>& k = kids[i];
    switch (n.kind) {
      case Node::Kind::kArray:
        if (n.min != 0) k.push_back(n.value);
        break;
      case Node::Kind::kObject:
        for (size_t j = 0; j < n.properties.size(); ++j) {
          if (n.required[j]) k.push_back(n.properties[j]);
        }
        break;
      case Node::Kind::kUnion:
        for (int32_t alt : n.dispatch) {
          if (alt >= 0) k.push_back(alt);
        }
        break;
      case Node::Kind::kSequence:
      case Node::Kind::kTagged:
        for (int32_t part : n.properties) {
          if (part >= 0) k.push_back(part);
        }
        break;
      default:
        break;
    }
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
  }
  std::vector<std::vector<int32_t>> parents(count);
  for (size_t i = 0; i < count; ++i) {
    for (int32_t c : kids[i]) parents[c].push_back(static_cast<int32_t>(i));
  }
  auto depth = [&](size_t i) {
    const Node& n = g.nodes[i];
    int32_t d = kTooDeep;
    switch (n.kind) {
      case Node::Kind::kString:
      case Node::Kind::kNumber:
      case Node::Kind::kLiterals:
      case Node::Kind::kRawText:
      case Node::Kind::kRegex:
        d = 0;
        break;
      case Node::Kind::kMap:
        d = 1;
        break;
      case Node::Kind::kArray:
        d = n.min == 0 ? 1 : 1 + g.nodes[n.value].min_depth;
        break;
      case Node::Kind::kObject:
        d = 1;
        for (int32_t c : kids[i]) d = std::max(d, 1 + g.nodes[c].min_depth);
        break;
      case Node::Kind::kUnion:
        for (int32_t c : kids[i]) d = std::min(d, g.nodes[c].min_depth);
        break;
      case Node::Kind::kSequence:  // every part, one after the other
        d = 0;
        for (int32_t c : kids[i]) d = std::max(d, g.nodes[c].min_depth);
        break;
      case Node::Kind::kTagged:  // the end (−1) or any next part
        if (n.min == 0) d = 0;
        for (int32_t next : n.properties) d = std::min(d, next < 0 ? 0 : g.nodes[next].min_depth);
        break;
    }
    return std::min(d, kTooDeep);
  };
  for (Node& n : g.nodes) n.min_depth = kTooDeep;
  std::vector<int32_t> todo(count);
  std::vector<bool> queued(count, true);
  for (size_t i = 0; i < count; ++i) todo[i] = static_cast<int32_t>(count - 1 - i);
  while (!todo.empty()) {
    const int32_t i = todo.back();
    todo.pop_back();
    queued[i] = false;
    const int32_t d = depth(i);
    if (d >= g.nodes[i].min_depth) continue;
    g.nodes[i].min_depth = d;
    for (int32_t p : parents[i]) {
      if (!queued[p]) {
        queued[p] = true;
        todo.push_back(p);
      }
    }
  }
  for (Node& n : g.nodes) {
    n.max_key_depth = 0;
    if (n.kind != Node::Kind::kObject) continue;
    for (int32_t p : n.properties)
      n.max_key_depth = std::max(n.max_key_depth, g.nodes[p].min_depth);
  }
}

std::vector<bool> FirstBytes(const Grammar& g, int32_t node) {
  std::vector<bool> first(256, false);
  const Node& n = g.nodes[node];
  switch (n.kind) {
    case Node::Kind::kObject:
    case Node::Kind::kMap:
      first['{'] = true;
      break;
    case Node::Kind::kArray:
      first['['] = true;
      break;
    case Node::Kind::kString:
      first['"'] = true;
      break;
    case Node::Kind::kNumber:
      first['-'] = true;
      for (int c = '0'; c <= '9'; ++c) first[c] = true;
      break;
    case Node::Kind::kLiterals:
      for (const auto& [b, child] : g.tries[n.literals].nodes[0].next) first[b] = true;
      break;
    case Node::Kind::kUnion:
      for (int b = 0; b < 256; ++b) first[b] = n.dispatch[b] >= 0;
      break;
    case Node::Kind::kSequence:  // (its first part; an empty first part is not looked through)
      if (!n.properties.empty()) first = FirstBytes(g, n.properties[0]);
      break;
    case Node::Kind::kTagged:
      for (const auto& [b, child] : g.tries[n.literals].nodes[0].next) first[b] = true;
      break;
    case Node::Kind::kRawText:
      for (int b = 0x20; b < 0xF5; ++b) first[b] = b < 0x80 || b >= 0xC2;
      first['\t'] = first['\n'] = first['\r'] = true;
      break;
    case Node::Kind::kRegex: {
      const RegexDfa& dfa = *g.regexes[static_cast<size_t>(n.regex)];
      for (int b = 0; b < 256; ++b) first[b] = dfa.Next(dfa.start, static_cast<uint8_t>(b)) >= 0;
      break;
    }
  }
  return first;
}

namespace {

std::atomic<int64_t> live_grammar_bytes{0};
std::atomic<int64_t> live_grammar_budget{kMaxLiveGrammarBytes};

// Keeps a counted grammar and gives its bytes back with the last holder.
struct Counted {
  std::shared_ptr<const Grammar> grammar;
  int64_t bytes = 0;
  ~Counted() { live_grammar_bytes -= bytes; }
};

template <typename T>
int64_t VectorHeap(const std::vector<T>& v) {
  return HeapBytes(v.capacity() * sizeof(T));
}

}  // namespace

int64_t GrammarMemoryBytes(const Grammar& g) {
  int64_t n = HeapBytes(sizeof(Grammar)) + VectorHeap(g.nodes) + VectorHeap(g.tries);
  for (const Node& node : g.nodes) {
    n += VectorHeap(node.properties) + HeapBytes((node.required.capacity() + 7) / 8) +
         VectorHeap(node.next_required) + VectorHeap(node.dispatch);
  }
  n += VectorHeap(g.regexes);
  for (const auto& dfa : g.regexes) n += HeapBytes(dfa->MemoryBytes());
  for (const LiteralTrie& trie : g.tries) {
    n += VectorHeap(trie.nodes) + VectorHeap(trie.texts);
    for (const LiteralTrie::Node& node : trie.nodes) {
      n += VectorHeap(node.next) + VectorHeap(node.below);
    }
    for (const std::string& text : trie.texts)
      n += text.size() > 15 ? HeapBytes(text.size() + 1) : 0;
  }
  return n;
}

int64_t RegexBytes(const Grammar& g) {
  int64_t n = 0;
  for (const auto& dfa : g.regexes) n += dfa->MemoryBytes();
  return n;
}

std::string RegexWorkSpent(const RegexBudget& budget) {
  return absl::StrCat(budget.what, " take too long to compile (more than ", kMaxSchemaRegexWork,
                      " automaton steps)");
}

std::string RegexBytesSpent(const RegexBudget& budget) {
  return absl::StrCat(budget.what, " take more than ", kMaxRegexBytesPerSchema >> 20,
                      " MiB as automata");
}

absl::Status ChargeRegexBudget(const Grammar& g, absl::string_view where, RegexBudget& budget) {
  budget.work -= g.regex_work;
  budget.bytes -= RegexBytes(g);
  if (budget.work < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", RegexWorkSpent(budget)));
  }
  if (budget.bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", RegexBytesSpent(budget)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Grammar>> CountLive(std::shared_ptr<const Grammar> g,
                                                         absl::string_view where) {
  const int64_t bytes = GrammarMemoryBytes(*g);
  const int64_t before = live_grammar_bytes.fetch_add(bytes);
  const int64_t budget = live_grammar_budget.load();
  if (before + bytes > budget) {
    live_grammar_bytes -= bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": the structured-output grammars of the requests in flight take ", before >> 20,
        " MiB, and this one ", bytes >> 20, " MiB more would pass the server's ", budget >> 20,
        " MiB; retry when some have finished"));
  }
  auto counted = std::make_shared<Counted>();
  counted->grammar = std::move(g);
  counted->bytes = bytes;
  const Grammar* raw = counted->grammar.get();
  return std::shared_ptr<const Grammar>(std::move(counted), raw);
}

int64_t LiveGrammarBytes() { return live_grammar_bytes.load(); }

void SetLiveGrammarBudget(int64_t bytes) { live_grammar_budget = bytes; }

absl::StatusOr<std::shared_ptr<const Grammar>> WithoutWhitespace(std::shared_ptr<const Grammar> g,
                                                                 absl::string_view where) {
  if (g->max_whitespace_run == 0) return g;
  auto compact = std::make_shared<Grammar>(*g);
  compact->max_whitespace_run = 0;
  return CountLive(std::move(compact), where);
}

absl::StatusOr<std::shared_ptr<const Grammar>> ChoiceGrammar(
    const std::vector<std::string>& choices, absl::string_view where) {
  auto invalid = [](absl::string_view at, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": ", what));
  };
  if (choices.empty()) return invalid(where, "give at least one choice");
  auto g = std::make_shared<Grammar>();
  LiteralTrie trie;
  size_t bytes = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return invalid(absl::StrCat(where, "[", i, "]"), "an empty choice");
    bytes += choices[i].size();
    if (bytes > kMaxLiteralBytes) {
      return invalid(where, absl::StrCat("the choices exceed ", kMaxLiteralBytes, " bytes"));
    }
    trie.Add(choices[i], static_cast<int32_t>(i));
  }
  g->tries.push_back(std::move(trie));
  g->nodes.emplace_back();
  g->nodes[0].kind = Node::Kind::kLiterals;
  g->nodes[0].literals = 0;
  g->root = 0;
  return CountLive(std::move(g), where);
}

absl::StatusOr<std::shared_ptr<const Grammar>> RegexGrammar(absl::string_view pattern,
                                                            absl::string_view where) {
  static LiveGrammars* const live = new LiveGrammars;
  return live->GetOrCompile(std::string(pattern), [&]() -> LiveGrammars::Compiled {
    RegexOptions options;
    options.flavor = RegexFlavor::kPython;
    absl::StatusOr<RegexDfa> dfa = CompileRegex(pattern, options, where);
    if (!dfa.ok()) return dfa.status();
    auto g = std::make_shared<Grammar>();
    g->regexes.push_back(std::make_shared<const RegexDfa>(*std::move(dfa)));
    g->nodes.emplace_back();
    g->nodes[0].kind = Node::Kind::kRegex;
    g->nodes[0].regex = 0;
    g->root = 0;
    return CountLive(std::move(g), where);
  });
}

}  // namespace linfer::structured
