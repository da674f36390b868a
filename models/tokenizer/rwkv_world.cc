// RWKV World vocabulary parsing, trie construction and greedy longest-match encoding (see
// rwkv_world.h). The trie is laid out breadth-first with each node's children contiguous, so a
// lookup is a scan (or binary search) over a few bytes of one array.
#include "models/tokenizer/rwkv_world.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

// Parses a field of 1..9 decimal digits.
bool ParseDecimal(absl::string_view field, int64_t* value) {
  if (field.empty() || field.size() > 9) return false;
  int64_t v = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *value = v;
  return true;
}

// Children of a trie node with more labels than this are found by binary search.
constexpr uint16_t kLinearScanChildren = 8;

}  // namespace

absl::Status RwkvWorldVocab::AddLine(absl::string_view line, std::vector<int32_t>* line_of_id,
                                     int32_t line_number, size_t* total_bytes) {
  if (line.empty()) return absl::InvalidArgumentError("empty line");
  if (absl::Status s = ValidateUtf8(line); !s.ok()) return s;
  for (char c : line) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "raw control character 0x%02X (write it as an escape)", static_cast<unsigned char>(c)));
    }
  }
  const size_t first_space = line.find(' ');
  const size_t last_space = line.rfind(' ');
  if (first_space == absl::string_view::npos || first_space == last_space) {
    return absl::InvalidArgumentError("expected `<id> <literal> <byte length>`");
  }
  int64_t id = 0, length = 0;
  if (!ParseDecimal(line.substr(0, first_space), &id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("id \"", line.substr(0, first_space), "\" is not a decimal number"));
  }
  if (id < 1 || id > kRwkvWorldMaxId) {
    return absl::InvalidArgumentError(absl::StrCat("id ", id, " is out of range [1, ",
                                                   kRwkvWorldMaxId, "] (0 is <|endoftext|>)"));
  }
  const absl::string_view length_field = line.substr(last_space + 1);
  if (!ParseDecimal(length_field, &length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte length \"", length_field, "\" is not a decimal number"));
  }
  absl::StatusOr<std::string> bytes =
      ParsePythonStringLiteral(line.substr(first_space + 1, last_space - first_space - 1));
  if (!bytes.ok()) return absl::InvalidArgumentError(bytes.status().message());
  if (bytes->empty()) return absl::InvalidArgumentError("empty token");
  if (static_cast<int64_t>(bytes->size()) != length) {
    return absl::InvalidArgumentError(
        absl::StrCat("the literal has ", bytes->size(), " bytes but the line says ", length));
  }
  if (bytes->size() > kRwkvWorldMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token of ", bytes->size(), " bytes exceeds ", kRwkvWorldMaxTokenBytes));
  }
  *total_bytes += bytes->size();
  if (*total_bytes > kRwkvWorldMaxTotalTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens exceed ", kRwkvWorldMaxTotalTokenBytes, " bytes in all"));
  }
  if (static_cast<size_t>(id) >= tokens_.size()) {
    tokens_.resize(id + 1);
    line_of_id->resize(id + 1, 0);
  }
  if ((*line_of_id)[id] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("duplicate id ", id, " (first defined on line ", (*line_of_id)[id], ")"));
  }
  (*line_of_id)[id] = line_number;
  tokens_[id] = *std::move(bytes);
  file_order_.push_back(static_cast<int32_t>(id));
  ++num_tokens_;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> RwkvWorldVocab::FromText(absl::string_view text,
                                                                         absl::string_view name) {
  if (static_cast<int64_t>(text.size()) > kRwkvWorldMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", text.size(), " bytes exceeds the ",
                                                   kRwkvWorldMaxFileBytes, "-byte limit"));
  }
  std::unique_ptr<RwkvWorldVocab> vocab(new RwkvWorldVocab());
  std::vector<int32_t> line_of_id;
  size_t total_bytes = 0;
  int32_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_number;
    if (absl::Status s = vocab->AddLine(line, &line_of_id, line_number, &total_bytes); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number, ": ", s.message()));
    }
    start = end + 1;
  }
  if (vocab->num_tokens_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no tokens"));
  }
  vocab->BuildTrie();
  return vocab;
}

absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> RwkvWorldVocab::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, kRwkvWorldMaxFileBytes);
  if (!text.ok()) return text.status();
  return FromText(*text, path);
}

void RwkvWorldVocab::BuildTrie() {
  // Token ids sorted by their bytes; among equal bytes the later line comes last and wins.
  std::vector<int32_t> sorted = file_order_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [this](int32_t a, int32_t b) { return tokens_[a] < tokens_[b]; });
  // Breadth-first: node k covers sorted[range_lo[k], range_hi[k]), whose tokens share the
  // node's prefix of depth_[k] bytes. Its children are appended in byte order when it is
  // visited, so they are contiguous and their ids follow the visiting order.
  std::vector<uint32_t> range_lo{0}, range_hi{static_cast<uint32_t>(sorted.size())}, depth{0};
  first_child_.assign(1, 0);
  num_children_.assign(1, 0);
  label_.assign(1, 0);
  token_.assign(1, -1);
  for (uint32_t node = 0; node < range_lo.size(); ++node) {
    uint32_t i = range_lo[node];
    const uint32_t hi = range_hi[node], d = depth[node];
    // Tokens that end here sort first (they are a prefix of the rest).
    for (; i < hi && tokens_[sorted[i]].size() == d; ++i) token_[node] = sorted[i];
    first_child_[node] = static_cast<uint32_t>(range_lo.size());
    while (i < hi) {
      const uint8_t byte = static_cast<uint8_t>(tokens_[sorted[i]][d]);
      uint32_t j = i + 1;
      while (j < hi && static_cast<uint8_t>(tokens_[sorted[j]][d]) == byte) ++j;
      if (node == 0) root_child_[byte] = static_cast<uint32_t>(range_lo.size());
      range_lo.push_back(i);
      range_hi.push_back(j);
      depth.push_back(d + 1);
      first_child_.push_back(0);
      num_children_.push_back(0);
      label_.push_back(byte);
      token_.push_back(-1);
      ++num_children_[node];
      i = j;
    }
  }
  file_order_.clear();
  file_order_.shrink_to_fit();
  depth2_start_ = 1 + num_children_[0];
  depth2_.assign(1 << 16, 0);
  for (uint32_t node = 1; node < depth2_start_; ++node) {
    for (uint32_t c = first_child_[node]; c < first_child_[node] + num_children_[node]; ++c) {
      depth2_[(uint32_t{label_[node]} << 8) | label_[c]] = c;
    }
  }
}

uint32_t RwkvWorldVocab::Child(uint32_t node, uint8_t byte) const {
  if (node < depth2_start_) return depth2_[(uint32_t{label_[node]} << 8) | byte];
  const uint32_t first = first_child_[node];
  const uint16_t n = num_children_[node];
  const uint8_t* labels = label_.data() + first;
  if (n <= kLinearScanChildren) {
    for (uint16_t k = 0; k < n; ++k) {
      if (labels[k] == byte) return first + k;
    }
    return 0;
  }
  const uint8_t* it = std::lower_bound(labels, labels + n, byte);
  return it != labels + n && *it == byte ? first + static_cast<uint32_t>(it - labels) : 0;
}

absl::Status RwkvWorldVocab::Encode(absl::string_view bytes, std::vector<int32_t>* ids) const {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t pos = 0;
  while (pos < n) {
    // Walk the trie as far as the text allows; the last node that ends a token is the match.
    uint32_t node = root_child_[data[pos]];
    size_t end = pos + 1, best_end = 0;
    int32_t best = -1;
    while (node != 0) {
      if (token_[node] >= 0) {
        best = token_[node];
        best_end = end;
      }
      if (end == n || num_children_[node] == 0) break;
      node = Child(node, data[end++]);
    }
    if (best < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "no vocabulary token starts with byte 0x%02X (at byte offset %d)", data[pos], pos));
    }
    ids->push_back(best);
    pos = best_end;
  }
  return absl::OkStatus();
}

std::string RwkvWorldVocab::DecodeBytes(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (const std::string* token = IdToToken(id)) out += *token;
  }
  return out;
}

std::string RwkvWorldVocab::Decode(absl::Span<const int32_t> ids) const {
  return LossyUtf8(DecodeBytes(ids));
}

const std::string* RwkvWorldVocab::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[id].empty()) return nullptr;
  return &tokens_[id];
}

std::optional<int32_t> RwkvWorldVocab::TokenToId(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  uint32_t node = root_child_[static_cast<uint8_t>(token[0])];
  for (size_t i = 1; i < token.size() && node != 0; ++i) {
    node = Child(node, static_cast<uint8_t>(token[i]));
  }
  if (node == 0 || token_[node] < 0) return std::nullopt;
  return token_[node];
}

}  // namespace linfer::tokenizer
