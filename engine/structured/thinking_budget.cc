// ThinkingBudget: counting a reasoning block's tokens and forcing its close.
#include "engine/structured/thinking_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer::structured {

ThinkingBudget::ThinkingBudget(ThinkingBudgetSpec spec, std::shared_ptr<const ByteTable> bytes,
                               std::shared_ptr<TokenConstraint> inner)
    : spec_(std::move(spec)),
      bytes_(std::move(bytes)),
      inner_(std::move(inner)),
      phase_(Phase::kBefore) {
  if (spec_.starts_inside) {
    Open();
    counted_ = spec_.counted_at_start;
    if (counted_ >= spec_.budget) forced_ = 0;
  }
}

void ThinkingBudget::Open() {
  phase_ = Phase::kInside;
  counted_ = 0;
  tail_.clear();
  if (spec_.budget <= 0) forced_ = 0;
}

std::string ThinkingBudget::BytesOf(int32_t token) const {
  if (token >= 0 && static_cast<size_t>(token) < bytes_->size()) {
    if (const std::optional<std::string>& b = (*bytes_)[static_cast<size_t>(token)]) return *b;
  }
  if (spec_.open_ids.size() == 1 && token == spec_.open_ids[0]) return spec_.open;
  if (spec_.close_ids.size() == 1 && token == spec_.close_ids[0]) return spec_.close;
  return "";
}

bool ThinkingBudget::SawClose(int32_t token) {
  tail_ += BytesOf(token);
  if (tail_.find(spec_.close) != std::string::npos) return true;
  const size_t keep = spec_.close.size() - 1;  // what a close split across tokens needs
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  return false;
}

bool ThinkingBudget::Allows(int32_t token) {
  if (std::optional<int32_t> f = Forced()) return token == *f;
  return inner_ == nullptr || inner_->Allows(token);
}

void ThinkingBudget::FillAllowed(absl::Span<uint64_t> allowed) {
  if (std::optional<int32_t> f = Forced()) {
    if (static_cast<size_t>(*f) / 64 < allowed.size()) {
      allowed[static_cast<size_t>(*f) / 64] |= uint64_t{1} << (*f % 64);
    }
    return;
  }
  if (inner_ != nullptr) {
    inner_->FillAllowed(allowed);
    return;
  }
  const size_t vocab = std::min(bytes_->size(), allowed.size() * 64);
  for (size_t t = 0; t < vocab; ++t) allowed[t / 64] |= uint64_t{1} << (t % 64);
}

absl::Status ThinkingBudget::Advance(int32_t token) {
  if (std::optional<int32_t> f = Forced()) {
    if (token != *f) {
      return absl::InternalError(
          absl::StrCat("thinking budget: token ", token, " where the block's close forces ", *f));
    }
    if (inner_ != nullptr) RETURN_IF_ERROR(inner_->Advance(token));
    if (static_cast<size_t>(++forced_) == spec_.close_ids.size()) {
      forced_ = -1;
      phase_ = Phase::kAfter;
    }
    return absl::OkStatus();
  }
  if (inner_ != nullptr) RETURN_IF_ERROR(inner_->Advance(token));
  switch (phase_) {
    case Phase::kBefore: {
      tail_ += BytesOf(token);
      const absl::string_view text = absl::StripLeadingAsciiWhitespace(tail_);
      if (absl::StartsWith(text, spec_.open)) {
        const std::string after(text.substr(spec_.open.size()));
        Open();
        tail_ = after;  // the rest of the token is inside (rarely a close as well)
        if (tail_.find(spec_.close) != std::string::npos) {
          phase_ = Phase::kAfter;
          forced_ = -1;
        }
      } else if (absl::StartsWith(spec_.open, text)) {
        tail_ = std::string(text);  // still whitespace, or the start of the open
      } else {
        phase_ = Phase::kAfter;  // the output began with something else
      }
      break;
    }
    case Phase::kInside:
      if (SawClose(token)) {
        phase_ = Phase::kAfter;
      } else if (++counted_ >= spec_.budget) {
        forced_ = 0;
      }
      break;
    case Phase::kAfter:
      break;
  }
  return absl::OkStatus();
}

bool ThinkingBudget::Complete() const {
  if (forced_ >= 0) return false;
  return inner_ == nullptr || inner_->Complete();
}

bool ThinkingBudget::Free() const { return forced_ < 0 && (inner_ == nullptr || inner_->Free()); }

std::optional<int32_t> ThinkingBudget::Forced() const {
  if (forced_ < 0) return std::nullopt;
  return spec_.close_ids[static_cast<size_t>(forced_)];
}

std::unique_ptr<TokenConstraint> ThinkingBudget::Fresh() const {
  std::shared_ptr<TokenConstraint> inner;
  if (inner_ != nullptr) inner = inner_->Fresh();
  return std::make_unique<ThinkingBudget>(spec_, bytes_, std::move(inner));
}

}  // namespace linfer::structured
