// The matcher's byte steps for containers and the frames that dispatch (json_matcher_text.cc:
// strings, patterns, raw text; json_matcher_number.cc: numbers). A frame that ends (a closing
// bracket or quote taken, a number or literal that cannot take the byte) pops itself; a value
// frame turns into the frame of the node it dispatches to. Phases:
//   object: open `{` → key `"…"` (trie of the keys still allowed) → colon → after value → comma;
//   map: the same with a free string key; array: open `[` → after item → next.
#include "engine/structured/json_matcher.h"

#include <algorithm>

namespace linfer::structured {
namespace {

enum ObjectPhase : uint8_t { kOpen = 0, kKey = 1, kColon = 2, kAfter = 3, kComma = 4 };
enum ArrayPhase : uint8_t { kArrayOpen = 0, kArrayAfter = 1, kArrayNext = 2 };

bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

}  // namespace

JsonMatcher::JsonMatcher(const Grammar* grammar) : g_(grammar) {
  stack_.reserve(16);
  stack_.push_back({kRoot, 0, 0, -1, 0, 0, 0, 0});
}

bool JsonMatcher::Feed(uint8_t b) {
  if (!IsWhitespace(b)) ws_run_ = 0;
  for (;;) {
    Frame& f = stack_.back();
    Step s = Step::kRefused;
    switch (f.kind) {
      case kRoot:
        s = StepRoot(f, b);
        break;
      case kValue:
        s = StepValue(f, b);
        break;
      case kObject:
        s = StepObject(f, b);
        break;
      case kMap:
        s = StepMap(f, b);
        break;
      case kArray:
        s = StepArray(f, b);
        break;
      case kString:
        s = StepString(f, b);
        break;
      case kNumber:
        s = StepNumber(f, b);
        break;
      case kLiteral:
        s = StepLiteral(f, b);
        break;
      case kSequence:
        s = StepSequence(f, b);
        break;
      case kTagged:
        s = StepTagged(f, b);
        break;
      case kRawText:
        s = StepRawText(f, b);
        break;
      case kRegexText:
        s = StepRegexText(f, b);
        break;
    }
    if (s != Step::kAgain) return s == Step::kTaken;
  }
}

bool JsonMatcher::FeedBytes(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonMatcher::Complete() const {
  const Frame& top = stack_.back();
  // Before anything: only a root that may be empty (a regex output matching the empty text, an
  // optional tagged text).
  if (top.kind == kRoot) return top.phase == 1 || MayBeEmpty(g_->root);
  return stack_.size() == 2 && MayEndHere(top);
}

bool JsonMatcher::MayEndHere(const Frame& f) const {
  switch (f.kind) {
    case kNumber:
      return NumberMayEndHere(f);
    case kLiteral:
      return g_->tries[g_->nodes[f.node].literals].nodes[f.a].terminal >= 0;
    case kValue:  // not started: only a value that may be empty
      return MayBeEmpty(f.node);
    case kTagged:
      return f.a == 0 && g_->nodes[f.node].min == 0;
    case kRegexText:
      return RegexOf(f).MayEnd(f.b, f.a);
    case kSequence: {
      const std::vector<int32_t>& parts = g_->nodes[f.node].properties;
      for (size_t i = static_cast<size_t>(f.a); i < parts.size(); ++i) {
        if (!MayBeEmpty(parts[i])) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

bool JsonMatcher::MayBeEmpty(int32_t node) const {
  const Node& n = g_->nodes[node];
  if (n.kind == Node::Kind::kTagged) return n.min == 0;
  if (n.kind == Node::Kind::kRegex) {
    const RegexDfa& dfa = *g_->regexes[static_cast<size_t>(n.regex)];
    return dfa.MayEnd(dfa.start, 0);
  }
  if (n.kind != Node::Kind::kSequence) return false;
  for (int32_t part : n.properties) {  // (sequences nest only as the builders make them: shallow)
    if (!MayBeEmpty(part)) return false;
  }
  return true;
}

bool JsonMatcher::Whitespace(uint8_t b) {
  if (!IsWhitespace(b) || ws_run_ >= g_->max_whitespace_run) return false;
  ++ws_run_;
  return true;
}

void JsonMatcher::Push(uint8_t kind, int32_t node, uint8_t phase) {
  stack_.push_back({kind, phase, 0, node, 0, 0, 0, 0});
}

bool JsonMatcher::KeyFits(const Node& n, int32_t at, int32_t lo, int32_t hi) const {
  const LiteralTrie& keys = g_->tries[n.literals];
  if (depth_ + n.max_key_depth <= kMaxNesting) return keys.Reaches(at, lo, hi);
  const std::vector<int32_t>& below = keys.nodes[at].below;  // deep in a recursion: one by one
  for (auto it = std::lower_bound(below.begin(), below.end(), lo); it != below.end() && *it <= hi;
       ++it) {
    if (Fits(n.properties[*it])) return true;
  }
  return false;
}

int32_t JsonMatcher::NextRequired(const Node& n, int32_t last) const {
  return n.next_required[static_cast<size_t>(last + 1)];
}

JsonMatcher::Step JsonMatcher::StepRoot(Frame& f, uint8_t /*b*/) {
  // The output is the value alone: no whitespace before it (a weak model's favourite tokens) or
  // after it.
  if (f.phase == 1) return Step::kRefused;
  f.phase = 1;
  Push(kValue, g_->root, /*phase=*/1);  // phase 1: no whitespace first
  return Step::kAgain;
}

JsonMatcher::Step JsonMatcher::StepValue(Frame& f, uint8_t b) {
  if (f.phase == 0 && Whitespace(b)) return Step::kTaken;
  const Node* n = &g_->nodes[f.node];
  while (n->kind == Node::Kind::kUnion) {  // unions of unions (any value) resolve in turn
    const int32_t next = n->dispatch[b];
    if (next < 0) return Step::kRefused;
    f.node = next;
    n = &g_->nodes[next];
  }
  f.a = f.b = 0;
  f.aux = 0;
  switch (n->kind) {
    case Node::Kind::kObject:
    case Node::Kind::kMap:
    case Node::Kind::kArray: {
      const uint8_t open = n->kind == Node::Kind::kArray ? '[' : '{';
      if (b != open || !Fits(f.node)) return Step::kRefused;
      ++depth_;
      f.kind = n->kind == Node::Kind::kObject ? kObject
               : n->kind == Node::Kind::kMap  ? kMap
                                              : kArray;
      f.phase = 0;
      f.a = n->kind == Node::Kind::kObject ? -1 : 0;
      return Step::kTaken;
    }
    case Node::Kind::kString:
      if (b != '"') return Step::kRefused;
      f.kind = kString;
      f.phase = kChars;
      if (n->regex >= 0) f.b = RegexOf(f).start;
      return Step::kTaken;
    case Node::Kind::kNumber:
      f.kind = kNumber;
      f.phase = 0;
      f.aux = 0;
      f.v = 0;
      f.w = 0;
      return StepNumber(f, b);
    case Node::Kind::kLiterals:
      f.kind = kLiteral;
      return StepLiteral(f, b);
    case Node::Kind::kSequence:
      f.kind = kSequence;
      return StepSequence(f, b);
    case Node::Kind::kTagged:
      f.kind = kTagged;
      return StepTagged(f, b);
    case Node::Kind::kRawText:
      f.kind = kRawText;
      f.phase = 0;
      return StepRawText(f, b);
    case Node::Kind::kRegex:
      f.kind = kRegexText;
      f.b = RegexOf(f).start;
      return StepRegexText(f, b);
    case Node::Kind::kUnion:
      break;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepObject(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const LiteralTrie& keys = g_->tries[n.literals];
  const int32_t count = static_cast<int32_t>(n.properties.size());
  const int32_t next_required = NextRequired(n, f.a);
  const int32_t lo = f.a + 1, hi = next_required < count ? next_required : count - 1;
  switch (f.phase) {
    case kOpen:
    case kComma: {
      if (Whitespace(b)) return Step::kTaken;
      if (b == '"') {
        const int32_t child = lo <= hi ? keys.Child(0, b) : -1;
        if (child < 0 || !KeyFits(n, child, lo, hi)) return Step::kRefused;
        f.b = child;
        f.phase = kKey;
        return Step::kTaken;
      }
      if (b == '}' && f.phase == kOpen && next_required == count) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    }
    case kKey: {
      const int32_t child = keys.Child(f.b, b);
      if (child < 0 || !KeyFits(n, child, lo, hi)) return Step::kRefused;
      f.b = child;
      const int32_t key = keys.nodes[child].terminal;
      if (key >= 0 && key >= lo && key <= hi) {  // the closing quote: keys are leaves
        f.a = key;
        f.phase = kColon;
      }
      return Step::kTaken;
    }
    case kColon:
      if (Whitespace(b)) return Step::kTaken;
      if (b != ':') return Step::kRefused;
      f.phase = kAfter;
      Push(kValue, n.properties[f.a]);  // f is not used after this (the stack may move)
      return Step::kTaken;
    case kAfter:
      if (Whitespace(b)) return Step::kTaken;
      if (b == ',' && lo <= hi && KeyFits(n, 0, lo, hi)) {  // some key may follow
        f.phase = kComma;
        return Step::kTaken;
      }
      if (b == '}' && next_required == count) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepMap(Frame& f, uint8_t b) {
  if (Whitespace(b)) return Step::kTaken;
  switch (f.phase) {
    case kOpen:
    case kComma:
      if (b == '"' && Fits(g_->nodes[f.node].value)) {
        f.phase = kColon;
        Push(kString, -1, kChars);
        return Step::kTaken;
      }
      if (b == '}' && f.phase == kOpen) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    case kColon: {
      if (b != ':') return Step::kRefused;
      f.phase = kAfter;
      const int32_t value = g_->nodes[f.node].value;
      Push(kValue, value);
      return Step::kTaken;
    }
    case kAfter:
      if (b == ',' && Fits(g_->nodes[f.node].value)) {
        f.phase = kComma;
        return Step::kTaken;
      }
      if (b == '}') {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::StepArray(Frame& f, uint8_t b) {
  if (Whitespace(b)) return Step::kTaken;
  const Node& n = g_->nodes[f.node];
  switch (f.phase) {
    case kArrayOpen:
      if (b == ']' && n.min == 0) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      if (n.max == 0 || !Fits(n.value)) return Step::kRefused;
      break;
    case kArrayAfter:
      if (b == ',' && f.a < n.max && Fits(n.value)) {
        f.phase = kArrayNext;
        return Step::kTaken;
      }
      if (b == ']' && f.a >= n.min) {
        stack_.pop_back();
        --depth_;
        return Step::kTaken;
      }
      return Step::kRefused;
    case kArrayNext:
      break;
  }
  // An item starts with this byte.
  ++f.a;
  f.phase = kArrayAfter;
  Push(kValue, n.value);
  return Step::kAgain;
}

JsonMatcher::Step JsonMatcher::StepLiteral(Frame& f, uint8_t b) {
  const LiteralTrie& t = g_->tries[g_->nodes[f.node].literals];
  const int32_t child = t.Child(f.a, b);
  if (child >= 0) {
    f.a = child;
    if (t.nodes[child].terminal >= 0 && t.nodes[child].next.empty()) stack_.pop_back();
    return Step::kTaken;
  }
  if (t.nodes[f.a].terminal < 0) return Step::kRefused;
  stack_.pop_back();  // a literal that could have gone on ("1" of 1 and 12) ends here
  return Step::kAgain;
}

// A sequence starts its parts one at a time as bytes come; the last part takes the sequence's
// frame (a tail call), so that a chain of sequences and tags (a tool call followed by another)
// never deepens the stack.
JsonMatcher::Step JsonMatcher::StepSequence(Frame& f, uint8_t /*b*/) {
  const std::vector<int32_t>& parts = g_->nodes[f.node].properties;
  const auto count = static_cast<int32_t>(parts.size());
  if (f.a >= count) {
    stack_.pop_back();
    return Step::kAgain;
  }
  const int32_t part = parts[static_cast<size_t>(f.a)];
  if (f.a == count - 1) {
    f = {kValue, 1, 0, part, 0, 0, 0, 0};  // phase 1: no whitespace first
    return Step::kAgain;
  }
  ++f.a;
  Push(kValue, part, /*phase=*/1);  // f is not used after this (the stack may move)
  return Step::kAgain;
}

// Tags are prefix-free, so a terminal node of the trie is a whole tag: its follower takes the
// frame. An optional tagged node gives the byte back when no tag starts with it.
JsonMatcher::Step JsonMatcher::StepTagged(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const LiteralTrie& tags = g_->tries[n.literals];
  const int32_t child = tags.Child(f.a, b);
  if (child < 0) {
    if (f.a != 0 || n.min != 0) return Step::kRefused;
    stack_.pop_back();
    return Step::kAgain;
  }
  f.a = child;
  const int32_t tag = tags.nodes[child].terminal;
  if (tag < 0) return Step::kTaken;
  const int32_t next = n.properties[static_cast<size_t>(tag)];
  if (next < 0) {
    stack_.pop_back();
  } else {
    f = {kValue, 1, 0, next, 0, 0, 0, 0};
  }
  return Step::kTaken;
}

}  // namespace linfer::structured
