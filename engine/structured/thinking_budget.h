// A reasoning model's thinking cut at a budget (vLLM's thinking_token_budget, Anthropic's
// thinking.budget_tokens), as a TokenConstraint around the request's own (or none).
//
// The output is read as text (each token's bytes from the vocabulary's byte table; a special
// token that is a marker by itself counts as the marker's text). The block is open from the
// start when the prompt opened it — what the prompt wrote inside it counts already, as vLLM
// counts it — or when the output begins (after whitespace) with `open` ("<think>"): a "<think>"
// later in an answer opens nothing. Inside, every token counts; the token that brings `close`
// ("</think>") ends the block. Once `budget` tokens have counted with the block still open, the
// tokens of `close_ids` are Forced() one by one, and then the output goes on as without a budget.
// One block per output: after it closes nothing is counted again.
//
// Outside the forced tokens the wrapper restricts nothing itself, so without an inner constraint
// it is Free(): the engine samples as for an unconstrained request (pre-sampling included) and only
// Advances it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/token_constraint.h"

namespace linfer::structured {

struct ThinkingBudgetSpec {
  int64_t budget = 0;  // tokens the block may hold before it is closed
  std::string open = "<think>";
  std::string close = "</think>";
  std::vector<int32_t> open_ids;   // the tokenization of `open`
  std::vector<int32_t> close_ids;  // the tokenization of `close` (non-empty): what is forced
  bool starts_inside = false;      // the prompt ends inside an open block
  int64_t counted_at_start = 0;    // tokens the prompt wrote inside it
};

class ThinkingBudget : public TokenConstraint {
 public:
  using ByteTable = std::vector<std::optional<std::string>>;
  // `bytes`: each token's bytes (nullopt: none, a special token); its size is the vocabulary's.
  // `inner`: the request's own constraint, or null.
  ThinkingBudget(ThinkingBudgetSpec spec, std::shared_ptr<const ByteTable> bytes,
                 std::shared_ptr<TokenConstraint> inner);

  bool Allows(int32_t token) override;
  void FillAllowed(absl::Span<uint64_t> allowed) override;
  absl::Status Advance(int32_t token) override;
  bool Complete() const override;
  bool Free() const override;
  std::optional<int32_t> Forced() const override;
  std::unique_ptr<TokenConstraint> Fresh() const override;

  bool forcing() const { return forced_ >= 0; }
  int64_t counted() const { return counted_; }

 private:
  enum class Phase { kBefore, kInside, kAfter };
  // `token`'s bytes ("" for none), a marker's text for a special token that is that marker.
  std::string BytesOf(int32_t token) const;
  // Appends `token`'s bytes to the tail of the text seen; whether `close` now ends within it.
  bool SawClose(int32_t token);
  void Open();  // the block is open: count from here

  const ThinkingBudgetSpec spec_;
  const std::shared_ptr<const ByteTable> bytes_;
  const std::shared_ptr<TokenConstraint> inner_;
  Phase phase_;
  int64_t counted_ = 0;
  int forced_ = -1;  // the index in close_ids of the token forced next; −1: none
  // kBefore: the output so far less its leading whitespace (a prefix of `open`); kInside: its last
  // bytes (enough to find `close` across tokens).
  std::string tail_;
};

}  // namespace linfer::structured
