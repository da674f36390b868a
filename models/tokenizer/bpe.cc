// BPE model (see bpe.h). The merge loop mirrors the reference library's Word::merge_all:
// candidates ordered by (rank, position), stale candidates skipped when popped.
#include "models/tokenizer/bpe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  // Heap order: the smallest (rank, pos) on top.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Splits a legacy "a b" merge line; exactly one space is allowed.
bool SplitMergeLine(const std::string& line, std::string* a, std::string* b) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) return false;
  *a = line.substr(0, space);
  *b = line.substr(space + 1);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  ASSIGN_OR_RETURN(const std::string type, GetType(model, "model"));
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("model type \"", type,
                     "\" is not supported (only BPE; WordPiece, Unigram and "
                     "WordLevel tokenizers are not implemented)"));
  }
  const Json* vocab = Find(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError("model BPE: missing \"vocab\" object");
  }
  const Json* merges = Find(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return absl::InvalidArgumentError("model BPE: missing \"merges\" array");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->vocab_.reserve(vocab->size());
  bpe->id_to_token_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const std::optional<int32_t> id = AsTokenId(it.value());
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: vocab entry \"", it.key().substr(0, 64), "\" has no valid id (",
                       it.value().dump().substr(0, 40), "; ids are integers in [0, 2^31))"));
    }
    // Two tokens with one id would make decoding it ambiguous (the reference then picks one at
    // random, run by run).
    if (auto [other, added] = bpe->id_to_token_.emplace(*id, it.key()); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: vocab entries \"", other->second.substr(0, 64), "\" and \"",
                       it.key().substr(0, 64), "\" have the same id ", *id));
    }
    bpe->vocab_[it.key()] = *id;
  }
  if (const Json* unk = Find(model, "unk_token"); unk != nullptr && unk->is_string()) {
    bpe->unk_token_ = unk->get<std::string>();
  }
  bpe->prefix_ = GetStringOr(model, "continuing_subword_prefix", "");
  bpe->suffix_ = GetStringOr(model, "end_of_word_suffix", "");
  bpe->fuse_unk_ = GetBoolOr(model, "fuse_unk", false);
  bpe->byte_fallback_ = GetBoolOr(model, "byte_fallback", false);
  bpe->ignore_merges_ = GetBoolOr(model, "ignore_merges", false);
  if (const Json* dropout = Find(model, "dropout");
      dropout != nullptr && dropout->is_number() && dropout->get<double>() != 0.0) {
    return absl::UnimplementedError("model BPE: dropout is not supported (it is random)");
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(absl::StrFormat("<0x%02X>", b));
    bpe->fallback_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
  }
  bpe->byte_ids_.fill(-1);
  RETURN_IF_ERROR(bpe->LoadMerges(*merges));
  return bpe;
}

absl::Status BpeModel::LoadMerges(const Json& merges) {
  merges_.reserve(merges.size());
  std::string a, b;
  uint32_t rank = 0;
  for (const Json& m : merges) {
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      if (!SplitMergeLine(line, &a, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat("model BPE: merge ", rank + 1, " (\"", line, "\") is not \"a b\""));
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: merge ", rank + 1, " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
    const std::string merged = a + b.substr(std::min(prefix_.size(), b.size()));
    const std::string* tokens[3] = {&a, &b, &merged};
    int32_t ids[3];
    for (int k = 0; k < 3; ++k) {
      auto it = vocab_.find(*tokens[k]);
      if (it == vocab_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("model BPE: merge ", rank + 1, " uses \"",
                                                       *tokens[k], "\" which is not in the vocab"));
      }
      ids[k] = it->second;
    }
    merges_[PairKey(ids[0], ids[1])] = Merge{rank, ids[2]};
    ++rank;
  }
  return absl::OkStatus();
}

bool BpeModel::EnableByteMode() {
  if (!prefix_.empty() || !suffix_.empty()) return false;
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToChar(static_cast<unsigned char>(b)), &ch);
    auto it = vocab_.find(ch);
    if (it == vocab_.end()) return false;
    ids[b] = it->second;
  }
  byte_ids_ = ids;
  byte_mode_ = true;
  if (ignore_merges_) {
    for (const auto& [token, id] : vocab_) {
      std::string raw;
      ByteLevelDecodeToken(token, &raw);
      if (ByteLevelEncode(raw) == token) byte_vocab_.emplace(std::move(raw), id);
    }
  }
  return true;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::optional<int32_t> BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

int32_t BpeModel::max_id() const {
  int32_t m = -1;
  for (const auto& [id, token] : id_to_token_) m = std::max(m, id);
  return m;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

absl::Status BpeModel::InitialSymbols(absl::string_view piece, std::vector<Symbol>* symbols) const {
  auto add = [symbols](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols->size());
    if (n > 0) symbols->back().next = n;
    symbols->push_back({id, n - 1, -1, len});
  };
  if (byte_mode_) {
    for (unsigned char b : piece) add(byte_ids_[b], 1);
    return absl::OkStatus();
  }
  int32_t unk_id = -1;  // pending unknown run: id and byte length
  uint32_t unk_len = 0;
  std::string s;
  for (size_t i = 0; i < piece.size();) {
    const uint32_t len = Utf8SequenceLength(static_cast<unsigned char>(piece[i]));
    s.assign(i == 0 ? "" : prefix_);
    s.append(piece.data() + i, len);
    i += len;
    if (i >= piece.size()) s.append(suffix_);
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      if (unk_id >= 0) add(unk_id, unk_len);
      unk_id = -1;
      add(it->second, len);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(s.begin(), s.end(), [&](char c) { return fallback_ids_[uint8_t(c)] >= 0; })) {
      for (char c : s) add(fallback_ids_[static_cast<unsigned char>(c)], 1);
      continue;
    }
    if (!unk_token_) continue;  // No unk token: the character is dropped.
    auto unk_it = vocab_.find(*unk_token_);
    if (unk_it == vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: unk_token \"", *unk_token_, "\" is not in the vocab"));
    }
    if (unk_id >= 0 && fuse_unk_) {
      unk_len += len;
    } else {
      if (unk_id >= 0) add(unk_id, unk_len);
      unk_id = unk_it->second;
      unk_len = len;
    }
  }
  if (unk_id >= 0) add(unk_id, unk_len);
  return absl::OkStatus();
}

void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& sym = *symbols_ptr;
  thread_local std::vector<Candidate> heap;
  heap.clear();
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    if (const Merge* m = FindMerge(sym[i].id, sym[i + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const Symbol right = sym[cur.next];
    const Merge* m = FindMerge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    sym[cur.next].len = 0;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* l = FindMerge(sym[cur.prev].id, cur.id)) {
        heap.push_back({l->rank, cur.prev, l->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (cur.next >= 0) {
      if (const Merge* r = FindMerge(cur.id, sym[cur.next].id)) {
        heap.push_back({r->rank, top.pos, r->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
}

absl::Status BpeModel::Tokenize(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    const auto& whole = byte_mode_ ? byte_vocab_ : vocab_;
    if (auto it = whole.find(piece); it != whole.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  const bool cacheable = piece.size() < kMaxCachedLength;
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  RETURN_IF_ERROR(InitialSymbols(piece, &symbols));
  MergeAll(&symbols);
  const size_t first = ids->size();
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids->push_back(s.id);
  }
  if (cacheable) {
    absl::WriterMutexLock lock(&cache_mu_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(piece), std::vector<int32_t>(ids->begin() + first, ids->end()));
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer::tokenizer
