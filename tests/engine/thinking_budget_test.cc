// structured::ThinkingBudget on a ten-token vocabulary: counting inside the block (opened by the
// prompt, with what it wrote there, or by the output's beginning; its markers whole, split across
// tokens or special), forcing the close at the budget, nothing counted after the block, Fresh, and
// an inner constraint kept.
#include "engine/structured/thinking_budget.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace linfer::structured {
namespace {

// 0 a special token (no bytes); the rest their text.
std::shared_ptr<const ThinkingBudget::ByteTable> Bytes() {
  return std::make_shared<const ThinkingBudget::ByteTable>(ThinkingBudget::ByteTable{
      std::nullopt, "a", "b", "<think>", "</think>", "</", "think", ">", "<", "x"});
}

ThinkingBudgetSpec Spec(int64_t budget, bool inside, std::vector<int32_t> close_ids = {4}) {
  ThinkingBudgetSpec s;
  s.budget = budget;
  s.starts_inside = inside;
  s.close_ids = std::move(close_ids);
  return s;
}

// The tokens FillAllowed allows.
std::vector<int32_t> Allowed(TokenConstraint& c) {
  std::vector<uint64_t> words(1, 0);
  c.FillAllowed(absl::MakeSpan(words));
  std::vector<int32_t> out;
  for (int32_t t = 0; t < 64; ++t) {
    if ((words[0] >> t) & 1) out.push_back(t);
  }
  return out;
}

const std::vector<int32_t> kAll = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

TEST(ThinkingBudgetTest, ClosesTheBlockAtItsBudget) {
  ThinkingBudget b(Spec(2, true), Bytes(), nullptr);
  EXPECT_TRUE(b.Free());
  EXPECT_FALSE(b.Forced());
  EXPECT_EQ(Allowed(b), kAll);
  ASSERT_TRUE(b.Advance(1).ok());
  EXPECT_TRUE(b.Free());
  ASSERT_TRUE(b.Advance(2).ok());
  EXPECT_TRUE(b.forcing());
  EXPECT_EQ(b.Forced(), 4);
  EXPECT_FALSE(b.Free());
  EXPECT_FALSE(b.Complete());  // no stop token before the close
  EXPECT_EQ(Allowed(b), std::vector<int32_t>{4});
  EXPECT_TRUE(b.Allows(4));
  EXPECT_FALSE(b.Allows(1));
  EXPECT_FALSE(b.Advance(1).ok());  // not the forced token: refused, nothing moved
  EXPECT_TRUE(b.forcing());
  ASSERT_TRUE(b.Advance(4).ok());
  EXPECT_TRUE(b.Free());
  EXPECT_TRUE(b.Complete());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.Advance(1).ok());  // after the block: not counted
  EXPECT_TRUE(b.Free());
  EXPECT_EQ(b.counted(), 2);
}

TEST(ThinkingBudgetTest, ABlockClosedWithinItsBudgetIsLeftAlone) {
  ThinkingBudget b(Spec(5, true), Bytes(), nullptr);
  for (const int32_t t : {1, 5, 6}) ASSERT_TRUE(b.Advance(t).ok());  // "a", "</", "think"
  EXPECT_EQ(b.counted(), 3);
  ASSERT_TRUE(b.Advance(7).ok());  // ">": the close, split across three tokens
  EXPECT_EQ(b.counted(), 3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b.Advance(2).ok());
  EXPECT_FALSE(b.forcing());
  EXPECT_EQ(b.counted(), 3);
}

TEST(ThinkingBudgetTest, OnlyTheOutputsBeginningOpensABlock) {
  ThinkingBudget b(Spec(2, false), Bytes(), nullptr);
  for (const int32_t t : {8, 6}) ASSERT_TRUE(b.Advance(t).ok());  // "<", "think"
  EXPECT_EQ(b.counted(), 0);
  ASSERT_TRUE(b.Advance(7).ok());  // ">": opened
  EXPECT_EQ(b.counted(), 0);
  ASSERT_TRUE(b.Advance(9).ok());
  EXPECT_FALSE(b.forcing());
  ASSERT_TRUE(b.Advance(9).ok());
  EXPECT_TRUE(b.forcing());
  // A whole "<think>" token opens one too; a budget of 0 forces the close at once.
  ThinkingBudget zero(Spec(0, false), Bytes(), nullptr);
  ASSERT_TRUE(zero.Advance(3).ok());
  EXPECT_TRUE(zero.forcing());
  // An answer that begins otherwise opens none, whatever comes later.
  ThinkingBudget answer(Spec(0, false), Bytes(), nullptr);
  for (const int32_t t : {1, 3, 9, 9}) ASSERT_TRUE(answer.Advance(t).ok());
  EXPECT_FALSE(answer.forcing());
  EXPECT_EQ(answer.counted(), 0);
}

// What the prompt wrote inside the block counts (vLLM's rule), and a close that is a special
// token (no bytes in the table) is still seen.
TEST(ThinkingBudgetTest, ThePromptsThinkingCountsAndASpecialCloseIsSeen) {
  ThinkingBudgetSpec spec = Spec(3, true);
  spec.counted_at_start = 2;
  ThinkingBudget b(spec, Bytes(), nullptr);
  ASSERT_TRUE(b.Advance(1).ok());
  EXPECT_TRUE(b.forcing());
  spec.counted_at_start = 3;
  EXPECT_TRUE(ThinkingBudget(spec, Bytes(), nullptr).forcing());
  ThinkingBudget special(Spec(5, true, {0}), Bytes(), nullptr);
  ASSERT_TRUE(special.Advance(1).ok());
  ASSERT_TRUE(special.Advance(0).ok());  // the close, a special token
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(special.Advance(2).ok());
  EXPECT_FALSE(special.forcing());
  EXPECT_EQ(special.counted(), 1);
}

TEST(ThinkingBudgetTest, ACloseOfSeveralTokensIsForcedInOrder) {
  ThinkingBudget b(Spec(0, true, {5, 6, 7}), Bytes(), nullptr);
  for (const int32_t t : {5, 6, 7}) {
    EXPECT_EQ(Allowed(b), std::vector<int32_t>{t});
    ASSERT_TRUE(b.Advance(t).ok());
  }
  EXPECT_TRUE(b.Free());
  EXPECT_EQ(b.counted(), 0);
}

TEST(ThinkingBudgetTest, FreshStartsOver) {
  ThinkingBudget b(Spec(1, true), Bytes(), nullptr);
  ASSERT_TRUE(b.Advance(1).ok());
  ASSERT_TRUE(b.forcing());
  std::unique_ptr<TokenConstraint> fresh = b.Fresh();
  EXPECT_TRUE(fresh->Free());
  ASSERT_TRUE(fresh->Advance(2).ok());
  EXPECT_FALSE(fresh->Free());
  EXPECT_EQ(Allowed(*fresh), std::vector<int32_t>{4});
}

// Allows even tokens only; complete after three.
class EvenTokens : public TokenConstraint {
 public:
  bool Allows(int32_t t) override { return t % 2 == 0; }
  void FillAllowed(absl::Span<uint64_t> allowed) override {
    for (int32_t t = 0; t < 10; t += 2) allowed[0] |= uint64_t{1} << t;
  }
  absl::Status Advance(int32_t t) override {
    if (t % 2 != 0) return absl::InternalError("odd");
    ++advanced;
    return absl::OkStatus();
  }
  bool Complete() const override { return advanced >= 3; }
  std::unique_ptr<TokenConstraint> Fresh() const override { return std::make_unique<EvenTokens>(); }
  int advanced = 0;
};

TEST(ThinkingBudgetTest, AnInnerConstraintStillHolds) {
  auto inner = std::make_shared<EvenTokens>();
  ThinkingBudget b(Spec(2, true), Bytes(), inner);
  EXPECT_FALSE(b.Free());
  EXPECT_EQ(Allowed(b), (std::vector<int32_t>{0, 2, 4, 6, 8}));
  EXPECT_FALSE(b.Advance(1).ok());
  ASSERT_TRUE(b.Advance(2).ok());
  ASSERT_TRUE(b.Advance(2).ok());
  EXPECT_EQ(Allowed(b), std::vector<int32_t>{4});  // the close, which the inner allows
  EXPECT_FALSE(b.Complete());
  ASSERT_TRUE(b.Advance(4).ok());
  EXPECT_EQ(inner->advanced, 3);
  EXPECT_TRUE(b.Complete());
  // A close the inner constraint refuses is still the one token forced; advancing past it fails
  // (the inner constraint's error), and nothing moves.
  ThinkingBudget odd(Spec(0, true, {5}), Bytes(), std::make_shared<EvenTokens>());
  EXPECT_EQ(Allowed(odd), std::vector<int32_t>{5});
  EXPECT_FALSE(odd.Advance(5).ok());
  EXPECT_EQ(odd.Forced(), 5);
}

}  // namespace
}  // namespace linfer::structured
