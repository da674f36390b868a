// Added-token registration and matching (see added_vocab.h), following the reference library's
// AddedVocabulary::add_tokens / find_matches.
#include "models/tokenizer/added_vocab.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/unicode.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

// A token's content and flags: two entries with the same key are the same token.
std::string TokenKey(const AddedToken& t) {
  const char flags[] = {static_cast<char>('0' + t.single_word), static_cast<char>('0' + t.lstrip),
                        static_cast<char>('0' + t.rstrip), static_cast<char>('0' + t.normalized),
                        static_cast<char>('0' + t.special)};
  return std::string(flags, sizeof(flags)) + t.content;
}

absl::StatusOr<AddedToken> ParseToken(const Json& j) {
  AddedToken t;
  ASSIGN_OR_RETURN(t.content, GetString(j, "content", "added_tokens entry"));
  t.special = GetBoolOr(j, "special", false);
  t.single_word = GetBoolOr(j, "single_word", false);
  t.lstrip = GetBoolOr(j, "lstrip", false);
  t.rstrip = GetBoolOr(j, "rstrip", false);
  t.normalized = GetBoolOr(j, "normalized", !t.special);
  return t;
}

char32_t LastChar(absl::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  int len = 0;
  return DecodeUtf8(text, start, &len);
}

}  // namespace

void AddedVocabulary::Trie::Insert(absl::string_view pattern, int32_t id) {
  if (pattern.empty()) return;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges.find(key);
    if (it == edges.end()) {
      it = edges.emplace(key, static_cast<int32_t>(ids.size())).first;
      ids.push_back(-1);
    }
    node = it->second;
  }
  if (ids[node] < 0) ids[node] = id;  // The first registered pattern wins ties.
}

int32_t AddedVocabulary::Trie::LongestAt(absl::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t k = pos; k < text.size(); ++k) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
    if (it == edges.end()) break;
    node = it->second;
    if (ids[node] >= 0) {
      best = ids[node];
      *len = k + 1 - pos;
    }
  }
  return best;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::Build(const Json* added_tokens,
                                                       const BpeModel& model,
                                                       const Normalizer* normalizer) {
  AddedVocabulary v;
  std::vector<AddedToken> tokens;
  if (added_tokens != nullptr) {
    if (!added_tokens->is_array()) return absl::InvalidArgumentError("added_tokens: not an array");
    for (const Json& j : *added_tokens) {
      ASSIGN_OR_RETURN(AddedToken t, ParseToken(j));
      tokens.push_back(std::move(t));
    }
  }
  std::vector<AddedToken> specials, others;
  for (const AddedToken& t : tokens) {
    if (t.special && !t.content.empty() && v.special_set_.insert(t.content).second) {
      specials.push_back(t);
    }
  }
  absl::flat_hash_set<std::string> existing;  // TokenKey of the tokens registered so far
  auto next_id = static_cast<int32_t>(model.vocab_size());
  for (const AddedToken& t : tokens) {
    if (t.content.empty() || !existing.insert(TokenKey(t)).second) continue;
    std::optional<int32_t> id = v.TokenToId(t.content);
    if (!id) id = model.TokenToId(t.content);
    if (!id) id = next_id++;
    v.by_content_[t.content] = *id;
    v.by_id_[*id] = t;
    if (!v.special_set_.contains(t.content)) others.push_back(t);
  }
  for (const std::vector<AddedToken>* list : {&specials, &others}) {
    for (const AddedToken& t : *list) {
      std::optional<int32_t> id = v.TokenToId(t.content);
      if (!id) id = model.TokenToId(t.content);
      if (!id) return absl::InternalError(absl::StrCat("added token without id: ", t.content));
      if (!t.normalized) {
        v.raw_trie_.Insert(t.content, *id);
        continue;
      }
      std::string content = t.content;
      if (normalizer != nullptr) RETURN_IF_ERROR(normalizer->Normalize(&content));
      v.normalized_trie_.Insert(content, *id);
    }
  }
  return v;
}

void AddedVocabulary::Split(absl::string_view text, bool normalized,
                            std::vector<Segment>* out) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;
  size_t pos = 0;
  bool have_run = false;  // [run_begin, run_end): whitespace up to a non-space or the end
  size_t run_begin = 0, run_end = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const int32_t id = trie.first_byte[static_cast<unsigned char>(text[pos])]
                           ? trie.LongestAt(text, pos, &len)
                           : -1;
    if (id < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;
    const AddedToken& token = by_id_.at(id);
    if (token.single_word) {
      int n = 0;
      const bool start_space = start == 0 || !IsWordChar(LastChar(text.substr(0, start)));
      const bool stop_space = stop == text.size() || !IsWordChar(DecodeUtf8(text, stop, &n));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      // Whitespace before the match, back to where the previous split ended (the reference
      // scans further, then clamps to that point: same result, without a quadratic rescan).
      size_t s = start;
      while (s > start_offset) {
        size_t k = s - 1;
        while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        int n = 0;
        if (!IsWhitespace(DecodeUtf8(text, k, &n))) break;
        s = k;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      // The whitespace run from `stop` ends where the run scanned for an earlier match inside it
      // ended: scan each run once.
      if (!have_run || stop < run_begin || stop > run_end) {
        have_run = true;
        run_begin = run_end = stop;
        int n = 0;
        while (run_end < text.size() && IsWhitespace(DecodeUtf8(text, run_end, &n))) run_end += n;
      }
      stop = run_end;
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    // Like the reference, drop empty splits: a match inside a run that a stripping token before
    // it already took.
    if (start < stop) out->push_back({start, stop, id});
    start_offset = std::max(start_offset, stop);
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::TokenToId(absl::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const auto& [id, token] : by_id_) m = std::max(m, id);
  return m;
}

const AddedToken* AddedVocabulary::FindId(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

}  // namespace linfer::tokenizer
