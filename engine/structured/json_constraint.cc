// TokenIndex's plain tokens come from a matcher inside a free string (a grammar of one string);
// JsonConstraint's masks walk the matcher over candidate tokens on a scratch copy.
#include "engine/structured/json_constraint.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace linfer::structured {
namespace {

void Set(absl::Span<uint64_t> bits, int32_t id) {
  bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<size_t>(id) % 64);
}

}  // namespace

TokenIndex::TokenIndex(std::vector<std::optional<std::string>> bytes)
    : bytes_(bytes.size()), by_first_(256), is_plain_(bytes.size(), false) {
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
    by_first_[static_cast<uint8_t>(b[0])].push_back(id);
    if (b.find_first_of("\"\\") != std::string::npos) continue;
    m = open;
    if (m.FeedBytes(b)) {
      is_plain_[i] = true;
      plain_.push_back(id);
      plain_chars_.push_back(static_cast<int32_t>(m.StringChars()));
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
  if (free) {
    const std::vector<int32_t>& plain = index_->plain();
    const std::vector<int32_t>& lengths = index_->plain_chars();
    for (size_t i = 0; i < plain.size(); ++i) {
      if (plain[i] < n && lengths[i] <= max_chars - chars) Set(allowed, plain[i]);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const std::vector<int32_t>& tokens = index_->by_first(static_cast<uint8_t>(b));
    if (tokens.empty()) continue;
    scratch_ = matcher_;
    if (!scratch_.Feed(static_cast<uint8_t>(b))) continue;
    for (const int32_t id : tokens) {
      if (id >= n || (free && index_->is_plain(id))) continue;
      scratch_ = matcher_;
      if (scratch_.FeedBytes(index_->bytes(id))) Set(allowed, id);
    }
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
