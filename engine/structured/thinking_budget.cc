// ThinkingBudget: counting a reasoning block's tokens and forcing its close.
#include "engine/structured/thinking_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer::structured {

ThinkingBudget::ThinkingBudget(ThinkingBudgetSpec spec, std::shared_ptr<const ByteTable> bytes,
                               std::shared_ptr<TokenConstraint> inner)
    : spec_(std::move(spec)),
      bytes_(std::move(bytes)),
      inner_(std::move(inner)),
      phase_(spec_.starts_inside ? Phase::kInside : Phase::kBefore) {
  if (phase_ == Phase::kInside && spec_.budget <= 0) forced_ = 0;
}

bool ThinkingBudget::Saw(int32_t token, const std::string& marker) {
  if (token >= 0 && static_cast<size_t>(token) < bytes_->size()) {
    const std::optional<std::string>& b = (*bytes_)[static_cast<size_t>(token)];
    if (b) tail_ += *b;
  }
  const bool found = tail_.find(marker) != std::string::npos;
  // What a marker split across tokens needs of the text so far; nothing once one is found.
  const size_t keep = found ? 0 : std::max(spec_.open.size(), spec_.close.size()) - 1;
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  return found;
}

bool ThinkingBudget::Allows(int32_t token) {
  if (forced_ >= 0 && token != spec_.close_ids[static_cast<size_t>(forced_)]) return false;
  return inner_ == nullptr || inner_->Allows(token);
}

void ThinkingBudget::FillAllowed(absl::Span<uint64_t> allowed) {
  if (forced_ >= 0) {
    const int32_t t = spec_.close_ids[static_cast<size_t>(forced_)];
    if (static_cast<size_t>(t) / 64 < allowed.size() && Allows(t)) {
      allowed[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
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
  if (forced_ >= 0) {
    const int32_t want = spec_.close_ids[static_cast<size_t>(forced_)];
    if (token != want) {
      return absl::InternalError(
          absl::StrCat("thinking budget: token ", token, " where the block's close forces ", want));
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
    case Phase::kBefore:
      if (Saw(token, spec_.open)) {
        phase_ = Phase::kInside;
        if (spec_.budget <= 0) forced_ = 0;
      }
      break;
    case Phase::kInside:
      if (Saw(token, spec_.close)) {
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

std::unique_ptr<TokenConstraint> ThinkingBudget::Fresh() const {
  std::shared_ptr<TokenConstraint> inner;
  if (inner_ != nullptr) inner = inner_->Fresh();
  return std::make_unique<ThinkingBudget>(spec_, bytes_, std::move(inner));
}

}  // namespace linfer::structured
