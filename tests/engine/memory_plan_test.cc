// PlanMemory (engine/memory_plan.h): the pools' budgets by device, with and without the caller's.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

namespace linfer {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryPlanTest, TheCpuGetsOneGibEachUnlessTold) {
  const MemoryPlan p = PlanMemory({.device = Device::kCpu, .free_bytes = 0, .has_kv = true});
  EXPECT_EQ(p.state_bytes, kGiB);
  EXPECT_EQ(p.kv_bytes, kGiB);
  const MemoryPlan told = PlanMemory(
      {.device = Device::kCpu, .has_kv = true, .state_bytes = 3 * kGiB, .kv_bytes = 5 * kGiB});
  EXPECT_EQ(told.state_bytes, 3 * kGiB);
  EXPECT_EQ(told.kv_bytes, 5 * kGiB);
}

TEST(MemoryPlanTest, AHybridOnCudaSplitsTheUsableShareTwoToOne) {
  // An H200 with a 0.8B model loaded: ≈ 138 GiB free; 60 % usable.
  const int64_t free_bytes = 138 * kGiB;
  const MemoryPlan p =
      PlanMemory({.device = Device::kCuda, .free_bytes = free_bytes, .has_kv = true});
  const auto usable = static_cast<int64_t>(kUsableShare * static_cast<double>(free_bytes));
  EXPECT_EQ(p.state_bytes, usable / 3 * 2);
  EXPECT_EQ(p.kv_bytes, usable - p.state_bytes) << "all of the usable share is planned";
}

TEST(MemoryPlanTest, StatesTheSlotsCapCannotUseGoToTheKvCache) {
  const int64_t free_bytes = 100 * kGiB, usable = 60 * kGiB;
  const MemoryPlan hybrid = PlanMemory({.device = Device::kCuda,
                                        .free_bytes = free_bytes,
                                        .has_kv = true,
                                        .max_state_bytes = 10 * kGiB});
  EXPECT_EQ(hybrid.state_bytes, 10 * kGiB);
  EXPECT_EQ(hybrid.kv_bytes, usable - 10 * kGiB);
  const MemoryPlan recurrent = PlanMemory({.device = Device::kCuda,
                                           .free_bytes = free_bytes,
                                           .has_kv = false,
                                           .max_state_bytes = 10 * kGiB});
  EXPECT_EQ(recurrent.state_bytes, 10 * kGiB);
  // A cap above the share changes nothing; a given state budget is the caller's, cap or not.
  const MemoryPlan loose = PlanMemory({.device = Device::kCuda,
                                       .free_bytes = free_bytes,
                                       .has_kv = true,
                                       .max_state_bytes = 1000 * kGiB});
  EXPECT_EQ(loose.state_bytes, usable / 3 * 2);
  const MemoryPlan given = PlanMemory({.device = Device::kCuda,
                                       .free_bytes = free_bytes,
                                       .has_kv = true,
                                       .state_bytes = 20 * kGiB,
                                       .max_state_bytes = 10 * kGiB});
  EXPECT_EQ(given.state_bytes, 20 * kGiB);
}

TEST(MemoryPlanTest, ARecurrentModelOnCudaGivesItAllToTheStates) {
  const int64_t free_bytes = 70 * kGiB;
  const MemoryPlan p =
      PlanMemory({.device = Device::kCuda, .free_bytes = free_bytes, .has_kv = false});
  EXPECT_EQ(p.state_bytes, static_cast<int64_t>(kUsableShare * static_cast<double>(free_bytes)));
  EXPECT_EQ(p.kv_bytes, kCpuAutoBytes) << "a placeholder: never allocated without a KV cache";
  // A KV budget the caller gave a model without KV costs the states nothing.
  const MemoryPlan told = PlanMemory(
      {.device = Device::kCuda, .free_bytes = free_bytes, .has_kv = false, .kv_bytes = 20 * kGiB});
  EXPECT_EQ(told.state_bytes, p.state_bytes);
  EXPECT_EQ(told.kv_bytes, 20 * kGiB);
}

TEST(MemoryPlanTest, WhatTheCallerFixedComesOffTheUsableShareFirst) {
  const int64_t free_bytes = 100 * kGiB, usable = 60 * kGiB;
  const MemoryPlan state_told = PlanMemory({.device = Device::kCuda,
                                            .free_bytes = free_bytes,
                                            .has_kv = true,
                                            .state_bytes = 16 * kGiB});
  EXPECT_EQ(state_told.state_bytes, 16 * kGiB);
  EXPECT_EQ(state_told.kv_bytes, usable - 16 * kGiB);
  const MemoryPlan kv_told = PlanMemory(
      {.device = Device::kCuda, .free_bytes = free_bytes, .has_kv = true, .kv_bytes = 24 * kGiB});
  EXPECT_EQ(kv_told.state_bytes, usable - 24 * kGiB);
  EXPECT_EQ(kv_told.kv_bytes, 24 * kGiB);
  const MemoryPlan both = PlanMemory({.device = Device::kCuda,
                                      .free_bytes = free_bytes,
                                      .has_kv = true,
                                      .state_bytes = 1,
                                      .kv_bytes = 2});
  EXPECT_EQ(both.state_bytes, 1);
  EXPECT_EQ(both.kv_bytes, 2);
}

TEST(MemoryPlanTest, AFullDeviceStillGetsTheMinimumSoTheAllocationNamesTheProblem) {
  for (const int64_t free_bytes : {int64_t{0}, int64_t{100} << 20}) {
    const MemoryPlan p =
        PlanMemory({.device = Device::kCuda, .free_bytes = free_bytes, .has_kv = true});
    EXPECT_EQ(p.state_bytes, kMinAutoBytes) << free_bytes;
    EXPECT_EQ(p.kv_bytes, kMinAutoBytes) << free_bytes;
  }
  // The caller's budget beyond the usable share leaves the other its minimum, not a negative.
  const MemoryPlan over = PlanMemory(
      {.device = Device::kCuda, .free_bytes = 10 * kGiB, .has_kv = true, .state_bytes = 40 * kGiB});
  EXPECT_EQ(over.state_bytes, 40 * kGiB);
  EXPECT_EQ(over.kv_bytes, kMinAutoBytes);
}

}  // namespace
}  // namespace linfer
