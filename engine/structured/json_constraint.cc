// TokenIndex's plain tokens come from a matcher inside a free string (a grammar of one string);
// JsonConstraint's masks walk the matcher over candidate tokens on a scratch copy.
#include "engine/structured/json_constraint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace linfer::structured {
namespace {

void Set(absl::Span<uint64_t> bits, int32_t id) {
  bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<size_t>(id) % 64);
}

}  // namespace

TokenIndex::TokenIndex(std::vector<std::optional<std::string>> bytes)
    : bytes_(bytes.size()), is_plain_(bytes.size(), false), is_raw_plain_(bytes.size(), false) {
  Grammar one_string;
  one_string.nodes.emplace_back();
  one_string.nodes[0].kind = Node::Kind::kString;
  one_string.root = 0;
  JsonMatcher open(&one_string);
  open.Feed('"');
  JsonMatcher m = open;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!bytes[i] || bytes[i]->empty()) continue;
    bytes_[i] = *std::move(bytes[i]);
    const std::string& b = bytes_[i];
    const auto id = static_cast<int32_t>(i);
    max_length_ = std::max(max_length_, b.size());
    if (b.find_first_of("\"\\") != std::string::npos) continue;
    m = open;
    if (m.FeedBytes(b)) {
      is_plain_[i] = true;
      plain_.push_back(id);
      plain_chars_.push_back(static_cast<int32_t>(m.StringChars()));
      if (b.find('<') == std::string::npos) {
        is_raw_plain_[i] = true;
        raw_plain_.push_back(id);
        raw_plain_chars_.push_back(plain_chars_.back());
      }
    }
  }
  BuildTrie();
}

// From the ids sorted by their bytes, level by level: a node's children are the distinct next
// bytes of its (contiguous) run of ids.
void TokenIndex::BuildTrie() {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!bytes_[i].empty()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  trie_tokens_.reserve(ids.size());
  struct Run {
    int32_t node;
    size_t begin, end, depth;  // ids[begin, end) share the node's prefix of `depth` bytes
  };
  trie_.push_back({0, false});
  std::vector<Run> level = {{0, 0, ids.size(), 0}}, next;
  while (!level.empty()) {
    next.clear();
    for (const Run& r : level) {
      size_t i = r.begin;
      TrieNode& node = trie_[r.node];
      node.tokens = static_cast<int32_t>(trie_tokens_.size());
      for (; i < r.end && bytes_[ids[i]].size() == r.depth; ++i) trie_tokens_.push_back(ids[i]);
      trie_[r.node].num_tokens = static_cast<int32_t>(trie_tokens_.size()) - trie_[r.node].tokens;
      trie_[r.node].children = static_cast<int32_t>(trie_.size());
      while (i < r.end) {
        const char b = bytes_[ids[i]][r.depth];
        size_t j = i;
        while (j < r.end && bytes_[ids[j]][r.depth] == b) ++j;
        next.push_back({static_cast<int32_t>(trie_.size()), i, j, r.depth + 1});
        trie_.push_back({static_cast<uint8_t>(b), false});
        ++trie_[r.node].num_children;
        i = j;
      }
    }
    std::swap(level, next);
  }
  // other_below, children before parents: every child has a larger index than its parent.
  // (A plain token without '<' is raw-plain, so other_below implies other_below_raw.)
  for (size_t n = trie_.size(); n-- > 0;) {
    TrieNode& node = trie_[n];
    for (int32_t t = 0; t < node.num_tokens; ++t) {
      const auto id = static_cast<size_t>(trie_tokens_[node.tokens + t]);
      node.other_below = node.other_below || !is_plain_[id];
      node.other_below_raw = node.other_below_raw || !is_raw_plain_[id];
    }
    for (int32_t c = 0; c < node.num_children; ++c) {
      node.other_below = node.other_below || trie_[node.children + c].other_below;
      node.other_below_raw = node.other_below_raw || trie_[node.children + c].other_below_raw;
    }
  }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenIndex> index)
    : grammar_(std::move(grammar)),
      index_(std::move(index)),
      matcher_(grammar_.get()),
      scratch_(grammar_.get()) {}

bool JsonConstraint::Allows(int32_t token) {
  if (!index_->usable(token)) return false;
  scratch_ = matcher_;
  return scratch_.FeedBytes(index_->bytes(token));
}

void JsonConstraint::FillAllowed(absl::Span<uint64_t> allowed) {
  const int64_t n = std::min<int64_t>(index_->vocab(), static_cast<int64_t>(allowed.size()) * 64);
  int64_t chars = 0, max_chars = 0;
  const bool free = matcher_.InFreeString(&chars, &max_chars);
  const bool raw = !free && matcher_.InFreeRawText(&chars, &max_chars);
  const RegexDfa* dfa = nullptr;
  int32_t state = 0;
  const bool regex = !free && !raw && matcher_.InRegex(&dfa, &state, &chars);
  // The shortcut's tokens: plain ones, or raw-plain ones (without '<') in raw text and where
  // strings may not hold "</"; the others are walked. In a regex, the DFA alone walks the plain
  // ones.
  const bool shortcut = free || raw || regex;
  const bool raw_list = raw || ((free || regex) && grammar_->no_close_tags);
  if (regex && dfa->cap >= 0) {
    FillRegex(*dfa, state, chars, raw_list, n, allowed);
  } else if (regex) {  // the same tokens wherever the DFA is in `state`: cached
    auto hit = std::find_if(regex_masks_.begin(), regex_masks_.end(), [&](const RegexMask& m) {
      return m.dfa == dfa && m.state == state && m.raw_list == raw_list &&
             m.bits.size() == allowed.size();
    });
    if (hit == regex_masks_.end()) {
      if (regex_masks_.size() < kRegexMasks) regex_masks_.emplace_back();
      hit = regex_masks_.begin() + static_cast<std::ptrdiff_t>(next_regex_mask_++ % kRegexMasks);
      hit->dfa = dfa;
      hit->state = state;
      hit->raw_list = raw_list;
      hit->bits.assign(allowed.size(), 0);
      FillRegex(*dfa, state, chars, raw_list, n, absl::MakeSpan(hit->bits));
    }
    for (size_t i = 0; i < allowed.size(); ++i) allowed[i] |= hit->bits[i];
  } else if (shortcut) {
    const std::vector<int32_t>& plain = raw_list ? index_->raw_plain() : index_->plain();
    const std::vector<int32_t>& lengths =
        raw_list ? index_->raw_plain_chars() : index_->plain_chars();
    for (size_t i = 0; i < plain.size(); ++i) {
      if (plain[i] < n && lengths[i] <= max_chars - chars) Set(allowed, plain[i]);
    }
  }
  // Depth-first over the trie; levels_[d] is the matcher after the d bytes of the current node.
  const std::vector<TokenIndex::TrieNode>& trie = index_->trie();
  const std::vector<int32_t>& ids = index_->trie_tokens();
  if (levels_.size() < index_->max_length() + 1) levels_.resize(index_->max_length() + 1, matcher_);
  levels_[0] = matcher_;
  std::vector<Visit>& path = path_;
  path.assign(1, {0, 0});
  while (!path.empty()) {
    Visit& v = path.back();
    const TokenIndex::TrieNode& node = trie[v.node];
    if (v.next_child == node.num_children) {
      path.pop_back();
      continue;
    }
    const int32_t child = node.children + v.next_child++;
    const TokenIndex::TrieNode& c = trie[child];
    // Only the shortcut's tokens below: set above.
    if (shortcut && !(raw_list ? c.other_below_raw : c.other_below)) continue;
    const size_t depth = path.size();
    levels_[depth] = levels_[depth - 1];
    if (!levels_[depth].Feed(c.byte)) continue;  // no token below can come next
    for (int32_t t = 0; t < c.num_tokens; ++t) {
      if (ids[c.tokens + t] < n) Set(allowed, ids[c.tokens + t]);
    }
    if (c.num_children > 0) path.push_back({child, 0});
  }
}

void JsonConstraint::FillRegex(const RegexDfa& dfa, int32_t state, int64_t chars, bool raw_list,
                               int64_t n, absl::Span<uint64_t> allowed) {
  const std::vector<TokenIndex::TrieNode>& trie = index_->trie();
  const std::vector<int32_t>& ids = index_->trie_tokens();
  regex_path_.assign(1, {0, 0, state, chars});
  while (!regex_path_.empty()) {
    RegexVisit& v = regex_path_.back();
    const TokenIndex::TrieNode& node = trie[static_cast<size_t>(v.node)];
    if (v.next_child == node.num_children) {
      regex_path_.pop_back();
      continue;
    }
    const int32_t child = node.children + v.next_child++;
    const TokenIndex::TrieNode& c = trie[static_cast<size_t>(child)];
    // No plain token holds these (nor raw-plain ones '<'): the matcher's walk takes them.
    if (c.byte < 0x20 || c.byte == '"' || c.byte == '\\' || (raw_list && c.byte == '<')) {
      continue;
    }
    const int32_t next = dfa.Next(v.state, c.byte);
    if (next < 0) continue;
    const int64_t next_chars = v.chars + ((c.byte & 0xC0) != 0x80 ? 1 : 0);
    if (!dfa.Fits(next, next_chars)) continue;
    for (int32_t t = 0; t < c.num_tokens; ++t) {
      const int32_t id = ids[static_cast<size_t>(c.tokens + t)];
      if (id < n && (raw_list ? index_->is_raw_plain(id) : index_->is_plain(id))) {
        Set(allowed, id);
      }
    }
    if (c.num_children > 0) regex_path_.push_back({child, 0, next, next_chars});
  }
}

absl::Status JsonConstraint::Advance(int32_t token) {
  if (!Allows(token)) {
    return absl::InternalError(
        absl::StrCat("structured output: token ", token, " does not continue the JSON here"));
  }
  std::swap(matcher_, scratch_);
  return absl::OkStatus();
}

std::unique_ptr<TokenConstraint> JsonConstraint::Fresh() const {
  return std::make_unique<JsonConstraint>(grammar_, index_);
}

}  // namespace linfer::structured
