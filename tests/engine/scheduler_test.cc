// Scheduler scenarios, without a model: budget, decode-first fairness, chunked prompts,
// priorities, FCFS, aging, slot admission, idle-session offload and preemption.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>

namespace linfer {
namespace {

SchedRequest Req(uint64_t id, int64_t target, int64_t computed = 0, int priority = 0,
                 uint64_t waiting_since = 0) {
  return {id, priority, id, waiting_since, target, computed, false};
}

std::map<uint64_t, int64_t> Tokens(const StepPlan& p) {
  std::map<uint64_t, int64_t> m;
  for (const auto& s : p.scheduled) m[s.id] = s.tokens;
  return m;
}

TEST(SchedulerTest, BudgetRespectedAndDecodesNeverStall) {
  SchedInput in;
  in.running = {Req(1, 10, 9), Req(2, 5000, 0), Req(3, 21, 20)};  // decode, long prompt, decode
  SchedulerOptions o;
  o.max_step_tokens = 100;
  StepPlan p = Schedule(in, o);
  auto t = Tokens(p);
  EXPECT_EQ(t[1], 1);
  EXPECT_EQ(t[3], 1);
  EXPECT_EQ(t[2], 98);  // the prompt is chunked into what is left
  EXPECT_EQ(p.total_tokens, 100);
}

TEST(SchedulerTest, TinyBudgetStillServesDecodesFirstInPriorityOrder) {
  SchedInput in;
  in.running = {Req(1, 100, 0, 5), Req(2, 3, 2, 0), Req(3, 8, 7, 1)};
  SchedulerOptions o;
  o.max_step_tokens = 2;
  StepPlan p = Schedule(in, o);
  ASSERT_EQ(p.scheduled.size(), 2u);
  EXPECT_EQ(p.scheduled[0].id, 2u);
  EXPECT_EQ(p.scheduled[1].id, 3u);
}

TEST(SchedulerTest, AdmissionByFreeSlotsFcfsWithinPriority) {
  SchedInput in;
  in.waiting = {Req(5, 10), Req(6, 10), Req(7, 10, 0, -1)};
  in.free_slots = 2;
  StepPlan p = Schedule(in, {});
  ASSERT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(p.admitted[0], 7u);  // higher priority (lower value) first
  EXPECT_EQ(p.admitted[1], 5u);  // then arrival order
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(Tokens(p).size(), 2u);
}

TEST(SchedulerTest, IdleSessionsAreOffloadedBeforeAnyoneWaits) {
  SchedInput in;
  in.waiting = {Req(1, 4), Req(2, 4), Req(3, 4)};
  in.free_slots = 1;
  in.idle_session_slots = 1;
  StepPlan p = Schedule(in, {});
  EXPECT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(p.offload_idle, 1);
}

TEST(SchedulerTest, WaitingRequestWhoseSessionHoldsASlotNeedsNoNewSlot) {
  SchedInput in;
  SchedRequest r = Req(1, 4);
  r.has_slot = true;
  in.waiting = {r};
  StepPlan p = Schedule(in, {});
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.offload_idle, 0);
}

TEST(SchedulerTest, PreemptsOnlyStrictlyLowerPriority) {
  SchedInput in;
  in.running = {Req(1, 50, 10, 3), Req(2, 50, 10, 0)};
  in.waiting = {Req(3, 5, 0, 1)};
  StepPlan p = Schedule(in, {});
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 1u);
  EXPECT_EQ(p.admitted, std::vector<uint64_t>{3});
  auto t = Tokens(p);
  EXPECT_FALSE(t.contains(1));
  // Same priority: no preemption, the newcomer waits (FCFS).
  in.waiting = {Req(4, 5, 0, 3)};
  p = Schedule(in, {});
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_TRUE(p.admitted.empty());
}

TEST(SchedulerTest, HeadOfLineBlocksLowerPriorityNotStarvesIt) {
  // A low-priority request waiting long enough ages ahead of fresh high-priority ones.
  SchedInput in;
  in.step = 1000;
  in.waiting = {Req(1, 5, 0, 3, /*waiting_since=*/0), Req(2, 5, 0, 0, /*waiting_since=*/999)};
  in.free_slots = 1;
  SchedulerOptions o;
  o.aging_steps = 100;  // 1000 steps waiting: effective priority 3 - 10 = -7
  StepPlan p = Schedule(in, o);
  EXPECT_EQ(p.admitted, std::vector<uint64_t>{1});
}

// Aging orders the waiting queue but never preempts: first come, first served (every priority
// 0) kept a running request and had a later one take its slot after 256 steps of waiting.
TEST(SchedulerTest, AgingNeverPreempts) {
  SchedInput in;
  in.step = 10000;
  in.running = {Req(1, 2000, 100, 0, /*waiting_since=*/0)};
  in.waiting = {Req(2, 5, 0, 0, /*waiting_since=*/1)};  // aged to priority −39
  StepPlan p = Schedule(in, {});
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_TRUE(p.admitted.empty());
  // Priorities of their own: a low-priority request aged past the one running waits for it
  // (it was preempted back after one step, and got one step in 1,280).
  in.running = {Req(1, 2000, 100, 1, 0)};
  in.waiting = {Req(2, 5, 0, 5, 1)};
  p = Schedule(in, {});
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_TRUE(p.admitted.empty());
}

// A request waiting for a slot does not hold up later ones whose state already sits in a slot: the
// slot it waits for may be one of theirs (a session's turn queued behind it kept its session's
// slot, and nothing ran again).
TEST(SchedulerTest, RequestsWithASlotPassOneWaitingForASlot) {
  SchedInput in;
  SchedRequest turn = Req(3, 4);
  turn.has_slot = true;
  in.waiting = {Req(2, 4), turn, Req(4, 4)};
  StepPlan p = Schedule(in, {});
  EXPECT_EQ(p.admitted, std::vector<uint64_t>{3});  // 4 needs a slot: it waits behind 2
  EXPECT_EQ(Tokens(p)[3], 4);
}

// A request ahead that cannot preempt (aged to the queue's head, its own priority low) does not
// stop a later, more urgent one from preempting by its own priority.
TEST(SchedulerTest, AnAgedHeadDoesNotBlockPreemptionBehindIt) {
  SchedInput in;
  in.step = 3000;
  in.running = {Req(1, 2000, 100, 5, 0)};
  in.waiting = {Req(2, 5, 0, 10, /*waiting_since=*/0), Req(3, 5, 0, 0, /*waiting_since=*/3000)};
  StepPlan p = Schedule(in, {});
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{1});
  EXPECT_EQ(p.admitted, std::vector<uint64_t>{3});
}

// Prompt chunks go by the requests' own priorities, not aged ones: a long-running low-priority
// prompt does not get its chunks ahead of a new high-priority one.
TEST(SchedulerTest, RunningRequestsDoNotAge) {
  SchedInput in;
  in.step = 10000;
  in.running = {Req(1, 5000, 0, 3, /*waiting_since=*/0), Req(2, 5000, 0, 0, 9999)};
  SchedulerOptions o;
  o.max_step_tokens = 100;
  auto t = Tokens(Schedule(in, o));
  EXPECT_EQ(t[2], 99);
  EXPECT_EQ(t[1], 1);
}

// Prompt logprobs (`every_row`): such chunks share every_row_tokens beyond their first token,
// and the budget they cannot use goes to the other prompts of the step.
TEST(SchedulerTest, EveryRowChunksShareTheirOwnBudget) {
  SchedInput in;
  in.running = {Req(1, 5000), Req(2, 5000), Req(3, 5000)};
  in.running[0].every_row = in.running[1].every_row = true;
  in.every_row_tokens = 10;
  SchedulerOptions o;
  o.max_step_tokens = 100;
  StepPlan p = Schedule(in, o);
  auto t = Tokens(p);
  EXPECT_EQ(t[1], 11);
  EXPECT_EQ(t[2], 1);
  EXPECT_EQ(t[3], 88);
  EXPECT_EQ(p.total_tokens, 100);
}

TEST(SchedulerTest, MaxRunningCapsTheBatch) {
  SchedInput in;
  for (uint64_t i = 1; i <= 10; ++i) in.waiting.push_back(Req(i, 3));
  in.free_slots = 10;
  SchedulerOptions o;
  o.max_running = 4;
  StepPlan p = Schedule(in, o);
  EXPECT_EQ(p.admitted.size(), 4u);
  EXPECT_EQ(p.scheduled.size(), 4u);
}

TEST(SchedulerTest, EveryRunningSequenceProgressesOverSteps) {
  // Simulate: 6 long prompts, budget 64: all finish prefill, none starves.
  SchedInput in;
  for (uint64_t i = 1; i <= 6; ++i) in.running.push_back(Req(i, 300));
  SchedulerOptions o;
  o.max_step_tokens = 64;
  for (int step = 0; step < 40; ++step) {
    StepPlan p = Schedule(in, o);
    EXPECT_LE(p.total_tokens, 64);
    for (auto& r : in.running) {
      for (auto& s : p.scheduled) {
        if (s.id == r.id) r.computed += s.tokens;
      }
      EXPECT_GE(r.computed, std::min<int64_t>(300, step + 1));  // ≥ 1 token per step each
    }
  }
  for (auto& r : in.running) EXPECT_EQ(r.computed, 300);
}

}  // namespace
}  // namespace linfer
