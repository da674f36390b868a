// regex_dfa.h's construction: the NFA (Thompson, over bytes), the subset construction over byte
// classes, the pruning of states that reach no match, and the length table.
#include "engine/structured/regex_dfa.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace linfer::structured {
namespace {

enum EdgeKind : uint8_t { kByte, kEpsilon, kBeginEdge, kEndEdge };

struct Edge {
  uint8_t lo, hi;  // kByte: the bytes it takes
  uint8_t kind;
  int32_t to;
};

struct Nfa {
  std::vector<std::vector<Edge>> out;
  bool too_big = false;

  int32_t Add() {
    if (out.size() >= static_cast<size_t>(kMaxNfaStates)) {
      too_big = true;
      return 0;  // the build goes on harmlessly; the caller checks too_big
    }
    out.emplace_back();
    return static_cast<int32_t>(out.size() - 1);
  }
  void Link(int32_t from, int32_t to, uint8_t kind = kEpsilon, uint8_t lo = 0, uint8_t hi = 0) {
    if (too_big) return;
    out[static_cast<size_t>(from)].push_back({lo, hi, kind, to});
  }
};

struct Frag {
  int32_t in, out;
};

int Utf8Length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void Encode(uint32_t c, uint8_t* b) {
  switch (Utf8Length(c)) {
    case 1:
      b[0] = static_cast<uint8_t>(c);
      break;
    case 2:
      b[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    case 3:
      b[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    default:
      b[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
  }
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one per byte of a character

// The code points [lo, hi] as sequences of byte ranges: split where the encoded length changes,
// then where a continuation byte's span is partial, until every byte position ranges freely.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      Utf8Sequences(lo, edge, out);
      Utf8Sequences(edge + 1, hi, out);
      return;
    }
  }
  const int n = Utf8Length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  Encode(lo, a);
  Encode(hi, b);
  ByteRanges r;
  for (int i = 0; i < n; ++i) r.push_back({a[i], b[i]});
  out->push_back(std::move(r));
}

Frag Build(Nfa& nfa, const RegexNode& node);

Frag BuildSet(Nfa& nfa, const CodeSet& set) {
  const Frag f{nfa.Add(), nfa.Add()};
  std::vector<ByteRanges> seqs;
  for (const auto& [lo, hi] : set) Utf8Sequences(lo, hi, &seqs);
  for (const ByteRanges& seq : seqs) {
    int32_t at = f.in;
    for (size_t i = 0; i < seq.size(); ++i) {
      const int32_t to = i + 1 == seq.size() ? f.out : nfa.Add();
      nfa.Link(at, to, kByte, seq[i].first, seq[i].second);
      at = to;
    }
  }
  return f;
}

Frag BuildRepeat(Nfa& nfa, const RegexNode& node) {
  const RegexNode& sub = node.subs[0];
  Frag f{nfa.Add(), 0};
  int32_t at = f.in;
  for (int32_t i = 0; i < node.min && !nfa.too_big; ++i) {
    const Frag c = Build(nfa, sub);
    nfa.Link(at, c.in);
    at = c.out;
  }
  if (node.max < 0) {  // then any number more: a loop
    const int32_t loop = nfa.Add();
    nfa.Link(at, loop);
    const Frag c = Build(nfa, sub);
    nfa.Link(loop, c.in);
    nfa.Link(c.out, loop);
    at = loop;
  } else {  // then up to max - min more, each optional
    const int32_t end = nfa.Add();
    for (int32_t i = node.min; i < node.max && !nfa.too_big; ++i) {
      const Frag c = Build(nfa, sub);
      nfa.Link(at, c.in);
      nfa.Link(at, end);
      at = c.out;
    }
    nfa.Link(at, end);
    at = end;
  }
  f.out = at;
  return f;
}

Frag Build(Nfa& nfa, const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kSet:
      return BuildSet(nfa, node.set);
    case RegexNode::Kind::kBegin:
    case RegexNode::Kind::kEnd: {
      const Frag f{nfa.Add(), nfa.Add()};
      nfa.Link(f.in, f.out, node.kind == RegexNode::Kind::kBegin ? kBeginEdge : kEndEdge);
      return f;
    }
    case RegexNode::Kind::kAlt: {
      const Frag f{nfa.Add(), nfa.Add()};
      for (const RegexNode& s : node.subs) {
        if (nfa.too_big) break;
        const Frag c = Build(nfa, s);
        nfa.Link(f.in, c.in);
        nfa.Link(c.out, f.out);
      }
      return f;
    }
    case RegexNode::Kind::kRepeat:
      return BuildRepeat(nfa, node);
    case RegexNode::Kind::kConcat:
      break;
  }
  Frag f{nfa.Add(), 0};
  int32_t at = f.in;
  for (const RegexNode& s : node.subs) {
    if (nfa.too_big) break;
    const Frag c = Build(nfa, s);
    nfa.Link(at, c.in);
    at = c.out;
  }
  f.out = at;
  return f;
}

// The subset construction.
class Subsets {
 public:
  // What a call costs besides its states (its vectors), in steps.
  static constexpr int64_t kCallWork = 16;

  Subsets(const Nfa& nfa, int32_t final_state) : nfa_(nfa), final_(final_state) {
    mark_.assign(nfa.out.size(), 0);
  }

  // The states reached from `seeds` by epsilon edges (and ^ edges when `begin`), sorted.
  std::vector<int32_t> Closure(const std::vector<int32_t>& seeds, bool begin) {
    ++stamp_;
    work_ += kCallWork;
    std::vector<int32_t> stack, out;
    for (int32_t s : seeds) Visit(s, &stack);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      out.push_back(s);
      work_ += 1 + static_cast<int64_t>(nfa_.out[static_cast<size_t>(s)].size());
      for (const Edge& e : nfa_.out[static_cast<size_t>(s)]) {
        if (e.kind == kEpsilon || (begin && e.kind == kBeginEdge)) Visit(e.to, &stack);
      }
    }
    std::sort(out.begin(), out.end());
    // The sort, and the hash of the set when it is looked up: log2 + 1 steps a state.
    work_ += static_cast<int64_t>(out.size()) * (1 + std::bit_width(out.size()));
    return out;
  }

  // Whether the text may end at `set`: the final state by epsilon and $ edges (and ^ ones at the
  // start), looked up in the states that reach it so (found once, backwards).
  bool Accepting(const std::vector<int32_t>& set, bool begin) {
    if (ends_.empty()) {
      ends_ = Reaching(/*begin=*/false);
      ends_at_start_ = Reaching(/*begin=*/true);
    }
    work_ += static_cast<int64_t>(set.size());
    const std::vector<uint8_t>& ends = begin ? ends_at_start_ : ends_;
    return std::any_of(set.begin(), set.end(),
                       [&](int32_t s) { return ends[static_cast<size_t>(s)] != 0; });
  }

  std::vector<int32_t> Move(const std::vector<int32_t>& set, uint8_t b) {
    work_ += kCallWork;
    std::vector<int32_t> out;
    for (int32_t s : set) {
      work_ += 1 + static_cast<int64_t>(nfa_.out[static_cast<size_t>(s)].size());
      for (const Edge& e : nfa_.out[static_cast<size_t>(s)]) {
        if (e.kind == kByte && b >= e.lo && b <= e.hi) out.push_back(e.to);
      }
    }
    return out;
  }

  // NFA states and edges visited so far.
  int64_t work() const { return work_; }

 private:
  void Visit(int32_t s, std::vector<int32_t>* stack) {
    if (mark_[static_cast<size_t>(s)] == stamp_) return;
    mark_[static_cast<size_t>(s)] = stamp_;
    stack->push_back(s);
  }

  // The states from which epsilon and $ edges (and ^ ones with `begin`) reach the final state.
  std::vector<uint8_t> Reaching(bool begin) {
    const size_t n = nfa_.out.size();
    auto counts = [&](const Edge& e) {
      return e.kind == kEpsilon || e.kind == kEndEdge || (begin && e.kind == kBeginEdge);
    };
    // The reversed edges in one array: first[t] .. first[t + 1] are the sources of t's.
    std::vector<int32_t> first(n + 1, 0), from;
    for (size_t s = 0; s < n; ++s) {
      for (const Edge& e : nfa_.out[s]) first[static_cast<size_t>(e.to) + 1] += counts(e);
      work_ += 1 + static_cast<int64_t>(nfa_.out[s].size());
    }
    for (size_t t = 0; t < n; ++t) first[t + 1] += first[t];
    from.resize(static_cast<size_t>(first[n]));
    std::vector<int32_t> at(first.begin(), first.end() - 1);
    for (size_t s = 0; s < n; ++s) {
      for (const Edge& e : nfa_.out[s]) {
        if (counts(e))
          from[static_cast<size_t>(at[static_cast<size_t>(e.to)]++)] = static_cast<int32_t>(s);
      }
    }
    std::vector<uint8_t> reach(n, 0);
    std::vector<int32_t> stack = {final_};
    reach[static_cast<size_t>(final_)] = 1;
    while (!stack.empty()) {
      const auto t = static_cast<size_t>(stack.back());
      stack.pop_back();
      for (int32_t i = first[t]; i < first[t + 1]; ++i) {
        const int32_t s = from[static_cast<size_t>(i)];
        if (!reach[static_cast<size_t>(s)]) reach[static_cast<size_t>(s)] = 1, stack.push_back(s);
      }
    }
    return reach;
  }

  const Nfa& nfa_;
  int32_t final_;
  std::vector<uint8_t> ends_, ends_at_start_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  int64_t work_ = 0;
};

bool Writable(uint8_t b, bool json_string) {
  if (!json_string || b >= 0x20) return true;
  return b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t';
}

// Byte classes: bytes that every edge, the alphabet and the character counting treat alike.
void ClassesOf(const Nfa& nfa, bool json_string, RegexDfa* dfa, std::vector<uint8_t>* rep) {
  bool split[257] = {};
  for (const auto& edges : nfa.out) {
    for (const Edge& e : edges) {
      if (e.kind != kByte) continue;
      split[e.lo] = true;
      split[e.hi + 1] = true;
    }
  }
  for (int b = 1; b < 256; ++b) {
    if (Writable(static_cast<uint8_t>(b), json_string) !=
        Writable(static_cast<uint8_t>(b - 1), json_string)) {
      split[b] = true;
    }
  }
  split[0x80] = split[0xC0] = true;
  int c = -1;
  for (int b = 0; b < 256; ++b) {
    if (b == 0 || split[b]) {
      ++c;
      rep->push_back(static_cast<uint8_t>(b));
    }
    dfa->class_of[static_cast<size_t>(b)] = static_cast<uint8_t>(c);
  }
  dfa->classes = c + 1;
}

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Keeps the states that can reach an accepting one; renumbers them. False when the start goes.
bool Prune(RegexDfa* dfa) {
  const int32_t n = dfa->states();
  const auto k = static_cast<size_t>(dfa->classes);
  std::vector<std::vector<int32_t>> back(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa->next[static_cast<size_t>(s) * k + c];
      if (t >= 0) back[static_cast<size_t>(t)].push_back(s);
    }
  }
  std::vector<uint8_t> live(static_cast<size_t>(n), 0);
  std::vector<int32_t> stack;
  for (int32_t s = 0; s < n; ++s) {
    if (dfa->accept[static_cast<size_t>(s)]) live[static_cast<size_t>(s)] = 1, stack.push_back(s);
  }
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    for (int32_t s : back[static_cast<size_t>(t)]) {
      if (!live[static_cast<size_t>(s)]) live[static_cast<size_t>(s)] = 1, stack.push_back(s);
    }
  }
  if (!live[static_cast<size_t>(dfa->start)]) return false;
  std::vector<int32_t> id(static_cast<size_t>(n), RegexDfa::kDead);
  int32_t m = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (live[static_cast<size_t>(s)]) id[static_cast<size_t>(s)] = m++;
  }
  std::vector<int32_t> next(static_cast<size_t>(m) * k);
  std::vector<uint8_t> accept(static_cast<size_t>(m));
  for (int32_t s = 0; s < n; ++s) {
    if (id[static_cast<size_t>(s)] < 0) continue;
    const auto to = static_cast<size_t>(id[static_cast<size_t>(s)]);
    accept[to] = dfa->accept[static_cast<size_t>(s)];
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa->next[static_cast<size_t>(s) * k + c];
      next[to * k + c] = t < 0 ? RegexDfa::kDead : id[static_cast<size_t>(t)];
    }
  }
  dfa->next = std::move(next);
  dfa->accept = std::move(accept);
  dfa->start = id[static_cast<size_t>(dfa->start)];
  return true;
}

// Merges equivalent states (Moore's partition refinement: states part when their acceptance or
// the blocks of their successors differ, until nothing parts; within kMaxMinimizeWork, else not
// at all: a chain of n states parts one a round, n² steps). A search's NFA sets differ long
// after they match alike (a{1,50} anywhere: over a thousand sets, 2 states).
void Minimize(RegexDfa* dfa) {
  const auto n = static_cast<size_t>(dfa->states());
  const auto k = static_cast<size_t>(dfa->classes);
  std::vector<int32_t> block(n);
  for (size_t s = 0; s < n; ++s) block[s] = dfa->accept[s] ? 1 : 0;
  size_t blocks = 0;
  int64_t work = 0;
  for (;;) {
    // A long chain of states parts one state a round: past the budget, keep the DFA as it is
    // (correct, only larger).
    work += static_cast<int64_t>(n * (k + 1));
    if (work > kMaxMinimizeWork) return;
    absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next_block(n);
    std::vector<int32_t> sig(k + 1);
    for (size_t s = 0; s < n; ++s) {
      sig[0] = block[s];
      for (size_t c = 0; c < k; ++c) {
        const int32_t t = dfa->next[s * k + c];
        sig[c + 1] = t < 0 ? -1 : block[static_cast<size_t>(t)];
      }
      next_block[s] = ids.try_emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    }
    block = std::move(next_block);
    if (ids.size() == blocks) break;
    blocks = ids.size();
  }
  std::vector<int32_t> next(blocks * k);
  std::vector<uint8_t> accept(blocks);
  for (size_t s = 0; s < n; ++s) {
    const auto b = static_cast<size_t>(block[s]);
    accept[b] = dfa->accept[s];
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa->next[s * k + c];
      next[b * k + c] = t < 0 ? RegexDfa::kDead : block[static_cast<size_t>(t)];
    }
  }
  dfa->next = std::move(next);
  dfa->accept = std::move(accept);
  dfa->start = block[static_cast<size_t>(dfa->start)];
}

// The length table (regex_dfa.h). `rep`: each class's first byte (its weight: 0 for a UTF-8
// continuation byte, else 1 character).
// Drops the bounds that every match meets anyway (maxLength 100 beside [a-z]{1,8}): the shortest
// match from the start (0-1 BFS) and the longest (none when a cycle is live: DFS, then the
// longest paths in reverse topological order).
void DropVacuousBounds(RegexDfa* dfa, const std::vector<bool>& heavy) {
  const auto n = static_cast<size_t>(dfa->states());
  const auto k = static_cast<size_t>(dfa->classes);
  auto next = [&](size_t s, size_t c) { return dfa->next[s * k + c]; };
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> dist(n, kNone);
  std::deque<size_t> queue = {static_cast<size_t>(dfa->start)};
  dist[queue.front()] = 0;
  int64_t shortest = kNone;
  while (!queue.empty()) {
    const size_t s = queue.front();
    queue.pop_front();
    if (dfa->accept[s]) shortest = std::min(shortest, dist[s]);
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = next(s, c);
      if (t < 0) continue;
      const int64_t d = dist[s] + (heavy[c] ? 1 : 0);
      if (d >= dist[static_cast<size_t>(t)]) continue;
      dist[static_cast<size_t>(t)] = d;
      if (heavy[c]) {
        queue.push_back(static_cast<size_t>(t));
      } else {
        queue.push_front(static_cast<size_t>(t));
      }
    }
  }
  if (shortest >= dfa->min_chars) dfa->min_chars = 0;
  // Post-order DFS (every state is reachable from the start); a grey target is a cycle.
  std::vector<uint8_t> colour(n, 0);  // 0 white, 1 grey, 2 black
  std::vector<size_t> order;
  std::vector<std::pair<size_t, size_t>> stack = {{static_cast<size_t>(dfa->start), 0}};
  colour[stack[0].first] = 1;
  while (!stack.empty()) {
    auto& [s, c] = stack.back();
    if (c == k) {
      colour[s] = 2;
      order.push_back(s);
      stack.pop_back();
      continue;
    }
    const int32_t t = next(s, c++);
    if (t < 0) continue;
    if (colour[static_cast<size_t>(t)] == 1) return;  // a cycle: matches of every length above
    if (colour[static_cast<size_t>(t)] == 0) {
      colour[static_cast<size_t>(t)] = 1;
      stack.push_back({static_cast<size_t>(t), 0});
    }
  }
  std::vector<int64_t> longest(n, -1);
  for (size_t s : order) {  // targets before sources
    int64_t best = dfa->accept[s] ? 0 : -1;
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = next(s, c);
      if (t >= 0 && longest[static_cast<size_t>(t)] >= 0) {
        best = std::max(best, longest[static_cast<size_t>(t)] + (heavy[c] ? 1 : 0));
      }
    }
    longest[s] = best;
  }
  if (longest[static_cast<size_t>(dfa->start)] <= dfa->max_chars) {
    dfa->max_chars = std::numeric_limits<int64_t>::max();
  }
}

absl::Status BuildLengths(RegexDfa* dfa, const std::vector<uint8_t>& rep, absl::string_view where) {
  {
    std::vector<bool> heavy(static_cast<size_t>(dfa->classes));
    for (size_t c = 0; c < heavy.size(); ++c) heavy[c] = (rep[c] & 0xC0) != 0x80;
    DropVacuousBounds(dfa, heavy);
  }
  const bool bounded_above = dfa->max_chars != std::numeric_limits<int64_t>::max();
  if (dfa->min_chars == 0 && !bounded_above) return absl::OkStatus();
  const int64_t cap = bounded_above ? dfa->max_chars : dfa->min_chars;
  const int64_t n = dfa->states();
  const auto k = static_cast<size_t>(dfa->classes);
  if (cap >= kMaxLengthTableBits || n * (cap + 1) > kMaxLengthTableBits ||
      n * (cap + 1) * static_cast<int64_t>(k) > kMaxLengthTableWork) {
    return Invalid(where, absl::StrCat("the pattern (", n, " states) beside ",
                                       bounded_above ? "maxLength " : "minLength ", cap,
                                       " is too large to enforce"));
  }
  dfa->cap = cap;
  dfa->saturating = !bounded_above;
  dfa->words = (cap + 1 + 63) / 64;
  dfa->reach.assign(static_cast<size_t>(n * dfa->words), 0);
  std::vector<bool> heavy(k);
  for (size_t c = 0; c < k; ++c) heavy[c] = (rep[c] & 0xC0) != 0x80;
  // back[t]: the (state, class) edges into t.
  std::vector<std::vector<std::pair<int32_t, uint32_t>>> back(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa->next[static_cast<size_t>(s) * k + c];
      if (t >= 0) back[static_cast<size_t>(t)].push_back({static_cast<int32_t>(s), c});
    }
  }
  std::vector<uint8_t> prev(static_cast<size_t>(n)), cur(static_cast<size_t>(n));
  std::vector<int32_t> stack;
  for (int64_t r = 0; r <= cap; ++r) {
    std::fill(cur.begin(), cur.end(), 0);
    stack.clear();
    auto add = [&](int32_t s) {
      if (!cur[static_cast<size_t>(s)]) cur[static_cast<size_t>(s)] = 1, stack.push_back(s);
    };
    for (int64_t t = 0; t < n; ++t) {
      if (r == 0) {
        if (dfa->accept[static_cast<size_t>(t)]) add(static_cast<int32_t>(t));
      } else if (prev[static_cast<size_t>(t)]) {  // one character more before t
        for (const auto& [s, c] : back[static_cast<size_t>(t)]) {
          if (heavy[c]) add(s);
        }
      }
    }
    // Then the states before those by continuation bytes (the character already counted), and
    // for the saturating last layer by any edge (a longer way to a length of `cap` or more).
    const bool any = r == cap && dfa->saturating;
    while (!stack.empty()) {
      const int32_t t = stack.back();
      stack.pop_back();
      for (const auto& [s, c] : back[static_cast<size_t>(t)]) {
        if (any || !heavy[c]) add(s);
      }
    }
    for (int64_t s = 0; s < n; ++s) {
      if (cur[static_cast<size_t>(s)]) {
        dfa->reach[static_cast<size_t>(s * dfa->words + r / 64)] |= uint64_t{1} << (r % 64);
      }
    }
    std::swap(prev, cur);
  }
  return absl::OkStatus();
}

}  // namespace

bool RegexDfa::Fits(int32_t state, int64_t chars) const {
  if (cap < 0) return true;
  if (chars > max_chars) return false;
  int64_t lo = std::max<int64_t>(0, min_chars - chars), hi = 0;
  if (saturating) {
    lo = std::min(lo, cap);
    hi = cap;
  } else {
    hi = max_chars - chars;  // ≤ cap
  }
  const uint64_t* w = &reach[static_cast<size_t>(state * words)];
  for (int64_t r = lo; r <= hi;) {
    const uint64_t bits = w[r / 64] >> (r % 64);
    const int64_t span = std::min<int64_t>(64 - r % 64, hi - r + 1);
    const uint64_t mask = span == 64 ? ~uint64_t{0} : (uint64_t{1} << span) - 1;
    if ((bits & mask) != 0) return true;
    r += span;
  }
  return false;
}

int64_t RegexDfa::MemoryBytes() const {
  return static_cast<int64_t>(sizeof(RegexDfa) + next.capacity() * sizeof(int32_t) +
                              accept.capacity() + reach.capacity() * sizeof(uint64_t)) +
         64 * 3;
}

absl::StatusOr<RegexDfa> CompileRegex(absl::string_view pattern, const RegexOptions& options,
                                      absl::string_view where) {
  absl::StatusOr<RegexNode> tree = ParseRegex(pattern, options.flavor, where);
  if (!tree.ok()) return tree.status();
  Nfa nfa;
  const Frag p = Build(nfa, *tree);
  int32_t initial = p.in, final_state = p.out;
  if (options.search) {  // (any char)* P (any char)*
    const int32_t loop = nfa.Add();
    const Frag skip = BuildSet(nfa, AnyCodePoint());
    nfa.Link(loop, skip.in);
    nfa.Link(skip.out, loop);
    nfa.Link(loop, p.in);
    initial = loop;
    final_state = nfa.Add();
    nfa.Link(p.out, final_state);
    const Frag tail = BuildSet(nfa, AnyCodePoint());
    nfa.Link(final_state, tail.in);
    nfa.Link(tail.out, final_state);
  }
  if (nfa.too_big) {
    return Invalid(where, absl::StrCat("the pattern is too large (more than ", kMaxNfaStates,
                                       " automaton states)"));
  }
  RegexDfa dfa;
  dfa.min_chars = options.min_chars;
  dfa.max_chars = options.max_chars;
  std::vector<uint8_t> rep;
  ClassesOf(nfa, options.json_string, &dfa, &rep);
  Subsets subsets(nfa, final_state);
  // DFA states by their NFA sets; the start is its own (^ edges taken), never shared.
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  sets.push_back(subsets.Closure({initial}, /*begin=*/true));
  dfa.accept.push_back(subsets.Accepting(sets[0], /*begin=*/true));
  dfa.start = 0;
  const auto k = static_cast<size_t>(dfa.classes);
  for (size_t i = 0; i < sets.size(); ++i) {
    for (size_t c = 0; c < k; ++c) {
      int32_t to = RegexDfa::kDead;
      if (Writable(rep[c], options.json_string)) {
        std::vector<int32_t> moved = subsets.Move(sets[i], rep[c]);
        if (!moved.empty()) {
          std::vector<int32_t> set = subsets.Closure(moved, /*begin=*/false);
          auto [it, added] = ids.try_emplace(set, static_cast<int32_t>(sets.size()));
          if (added) {
            if (sets.size() >= static_cast<size_t>(kMaxRegexStates)) {
              return Invalid(where, absl::StrCat("the pattern compiles to more than ",
                                                 kMaxRegexStates, " states"));
            }
            dfa.accept.push_back(subsets.Accepting(set, /*begin=*/false));
            sets.push_back(std::move(set));
          }
          to = it->second;
        }
      }
      dfa.next.push_back(to);
      if (subsets.work() > options.max_work) {
        return Invalid(where, absl::StrCat("the pattern takes too long to compile (more than ",
                                           options.max_work, " automaton steps)"));
      }
    }
  }
  dfa.compile_work = subsets.work();
  if (!Prune(&dfa)) {
    RegexOptions any_text = options;  // was it the control characters?
    any_text.json_string = false;
    any_text.min_chars = 0;
    any_text.max_chars = std::numeric_limits<int64_t>::max();
    return Invalid(where, options.json_string && CompileRegex(pattern, any_text, where).ok()
                              ? "the pattern admits no string (control characters other than "
                                "\\b \\f \\n \\r \\t are never written)"
                              : "the pattern admits no text");
  }
  Minimize(&dfa);
  if (absl::Status s = BuildLengths(&dfa, rep, where); !s.ok()) return s;
  if (!dfa.Fits(dfa.start, 0)) {
    const bool no_max = options.max_chars == std::numeric_limits<int64_t>::max();
    const std::string lengths = no_max ? absl::StrCat("at least ", options.min_chars)
                                : options.min_chars == 0
                                    ? absl::StrCat("at most ", options.max_chars)
                                    : absl::StrCat(options.min_chars, " to ", options.max_chars);
    return Invalid(where, absl::StrCat("the pattern admits no string of ", lengths,
                                       " characters (minLength / maxLength)"));
  }
  return dfa;
}

}  // namespace linfer::structured
