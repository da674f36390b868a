// PlanMemory (engine/memory_plan.h): the pools' and the step's budgets by device, with and without
// the caller's.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

namespace linfer {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A CUDA device with `free_bytes` free after the weights (of `total_bytes`, by default as many),
// the caller's budgets 0; the cases set what they fix.
MemoryPlanInput Cuda(int64_t free_bytes, bool has_kv, int64_t total_bytes = 0) {
  return {.device = Device::kCuda,
          .free_bytes = free_bytes,
          .total_bytes = total_bytes > 0 ? total_bytes : free_bytes,
          .has_kv = has_kv};
}

// PlanMemory of `in` with one field changed.
template <typename T>
MemoryPlan With(MemoryPlanInput in, T MemoryPlanInput::*field, T value) {
  in.*field = value;
  return PlanMemory(in);
}

TEST(MemoryPlanTest, TheCpuGetsOneGibEachUnlessTold) {
  const MemoryPlan p = PlanMemory({.device = Device::kCpu, .free_bytes = 0, .has_kv = true});
  EXPECT_EQ(p.state_bytes, kGiB);
  EXPECT_EQ(p.kv_bytes, kGiB);
  const MemoryPlan told = PlanMemory(
      {.device = Device::kCpu, .has_kv = true, .state_bytes = 3 * kGiB, .kv_bytes = 5 * kGiB});
  EXPECT_EQ(told.state_bytes, 3 * kGiB);
  EXPECT_EQ(told.kv_bytes, 5 * kGiB);
}

TEST(MemoryPlanTest, TheStepBudgetGoesByTheDevicesMemoryUnlessTold) {
  EXPECT_EQ(PlanMemory({.device = Device::kCpu}).step_tokens, 128);
  EXPECT_EQ(PlanMemory(Cuda(60 * kGiB, true, 80 * kGiB)).step_tokens, 8192) << "an 80 GB H100";
  EXPECT_EQ(PlanMemory(Cuda(60 * kGiB, true, kBigGpuBytes)).step_tokens, 8192);
  EXPECT_EQ(PlanMemory(Cuda(20 * kGiB, true, kBigGpuBytes - 1)).step_tokens, 2048);
  EXPECT_EQ(PlanMemory(Cuda(20 * kGiB, true, 24 * kGiB)).step_tokens, 2048) << "a 24 GB card";
  EXPECT_EQ(With(Cuda(60 * kGiB, true, 80 * kGiB), &MemoryPlanInput::step_tokens, int64_t{512})
                .step_tokens,
            512);
  EXPECT_EQ(PlanMemory({.device = Device::kCpu, .step_tokens = 64}).step_tokens, 64);
}

TEST(MemoryPlanTest, AHybridOnCudaSplitsTheUsableShareTwoToOne) {
  // An H200 with a 0.8B model loaded: ≈ 138 GiB free; 60 % usable.
  const int64_t free_bytes = 138 * kGiB;
  const MemoryPlan p = PlanMemory(Cuda(free_bytes, true));
  const auto usable = static_cast<int64_t>(kUsableShare * static_cast<double>(free_bytes));
  EXPECT_EQ(p.state_bytes, usable / 3 * 2);
  EXPECT_EQ(p.kv_bytes, usable - p.state_bytes) << "all of the usable share is planned";
}

TEST(MemoryPlanTest, StatesTheSlotsCapCannotUseGoToTheKvCache) {
  const int64_t free_bytes = 100 * kGiB, usable = 60 * kGiB;
  const auto cap = &MemoryPlanInput::max_state_bytes;
  const MemoryPlan hybrid = With(Cuda(free_bytes, true), cap, 10 * kGiB);
  EXPECT_EQ(hybrid.state_bytes, 10 * kGiB);
  EXPECT_EQ(hybrid.kv_bytes, usable - 10 * kGiB);
  EXPECT_EQ(With(Cuda(free_bytes, false), cap, 10 * kGiB).state_bytes, 10 * kGiB);
  // A cap above the share changes nothing; a given state budget is the caller's, cap or not.
  EXPECT_EQ(With(Cuda(free_bytes, true), cap, 1000 * kGiB).state_bytes, usable / 3 * 2);
  MemoryPlanInput given = Cuda(free_bytes, true);
  given.state_bytes = 20 * kGiB;
  EXPECT_EQ(With(given, cap, 10 * kGiB).state_bytes, 20 * kGiB);
}

TEST(MemoryPlanTest, ARecurrentModelOnCudaGivesItAllToTheStates) {
  const int64_t free_bytes = 70 * kGiB;
  const MemoryPlan p = PlanMemory(Cuda(free_bytes, false));
  EXPECT_EQ(p.state_bytes, static_cast<int64_t>(kUsableShare * static_cast<double>(free_bytes)));
  EXPECT_EQ(p.kv_bytes, kCpuAutoBytes) << "a placeholder: never allocated without a KV cache";
  // A KV budget the caller gave a model without KV costs the states nothing.
  const MemoryPlan told = With(Cuda(free_bytes, false), &MemoryPlanInput::kv_bytes, 20 * kGiB);
  EXPECT_EQ(told.state_bytes, p.state_bytes);
  EXPECT_EQ(told.kv_bytes, 20 * kGiB);
}

TEST(MemoryPlanTest, WhatTheCallerFixedComesOffTheUsableShareFirst) {
  const int64_t free_bytes = 100 * kGiB, usable = 60 * kGiB;
  const MemoryPlan state_told =
      With(Cuda(free_bytes, true), &MemoryPlanInput::state_bytes, 16 * kGiB);
  EXPECT_EQ(state_told.state_bytes, 16 * kGiB);
  EXPECT_EQ(state_told.kv_bytes, usable - 16 * kGiB);
  const MemoryPlan kv_told = With(Cuda(free_bytes, true), &MemoryPlanInput::kv_bytes, 24 * kGiB);
  EXPECT_EQ(kv_told.state_bytes, usable - 24 * kGiB);
  EXPECT_EQ(kv_told.kv_bytes, 24 * kGiB);
  MemoryPlanInput both = Cuda(free_bytes, true);
  both.state_bytes = 1;
  both.kv_bytes = 2;
  EXPECT_EQ(PlanMemory(both).state_bytes, 1);
  EXPECT_EQ(PlanMemory(both).kv_bytes, 2);
}

TEST(MemoryPlanTest, AFullDeviceStillGetsTheMinimumSoTheAllocationNamesTheProblem) {
  for (const int64_t free_bytes : {int64_t{0}, int64_t{100} << 20}) {
    const MemoryPlan p = PlanMemory(Cuda(free_bytes, true, 80 * kGiB));
    EXPECT_EQ(p.state_bytes, kMinAutoBytes) << free_bytes;
    EXPECT_EQ(p.kv_bytes, kMinAutoBytes) << free_bytes;
  }
  // The caller's budget beyond the usable share leaves the other its minimum, not a negative.
  const MemoryPlan over = With(Cuda(10 * kGiB, true), &MemoryPlanInput::state_bytes, 40 * kGiB);
  EXPECT_EQ(over.state_bytes, 40 * kGiB);
  EXPECT_EQ(over.kv_bytes, kMinAutoBytes);
}

}  // namespace
}  // namespace linfer
