// The scheduler: pure CPU logic, no model, no device. Each step it turns the running and waiting
// requests and the pool's occupancy into a StepPlan: every running sequence gets up to
// `target − computed` tokens within a token budget (a decode token first for everyone, then
// prompt chunks), waiting requests are admitted by priority (lower value first, FCFS within a
// priority, aging against starvation) while slots can be found — free, reclaimed from idle
// sessions, or taken from a running request of strictly lower priority of its own (preemption
// by offload; aging never preempts, so first come, first served never does). Requests whose
// state is already in a slot are admitted past one that waits for a slot.
#pragma once

#include <cstdint>
#include <vector>

namespace linfer {

struct SchedulerOptions {
  int64_t max_step_tokens = 512;  // token budget of one step
  int max_running = 256;          // sequences in one step (also capped by slots)
  int aging_steps = 256;          // every this many steps waiting lowers the priority value by 1
};

struct SchedRequest {
  uint64_t id = 0;
  int priority = 0;            // lower runs first
  uint64_t arrival = 0;        // submission order
  uint64_t waiting_since = 0;  // step it entered the waiting queue
  int64_t target = 0;          // tokens the state must have consumed before the next sample
  int64_t computed = 0;        // tokens consumed so far
  bool has_slot = false;       // a waiting request whose state already sits in a slot
  // Its chunks need every row's logits (prompt logprobs): the tokens of its chunk beyond the
  // first come out of SchedInput::every_row_tokens too.
  bool every_row = false;
};

struct SchedInput {
  std::vector<SchedRequest> running;  // hold slots
  std::vector<SchedRequest> waiting;  // need admission
  int free_slots = 0;
  int idle_session_slots = 0;  // slots reclaimable by offloading idle sessions
  uint64_t step = 0;
  // The tokens beyond each chunk's first that `every_row` requests may take in all this step.
  int64_t every_row_tokens = 0;
};

struct ScheduledSeq {
  uint64_t id = 0;
  int64_t tokens = 0;
};

struct StepPlan {
  std::vector<ScheduledSeq> scheduled;  // in batch order
  std::vector<uint64_t> admitted;       // waiting → running (each takes a slot unless has_slot)
  std::vector<uint64_t> preempted;      // running → waiting; their states go to host RAM
  int offload_idle = 0;                 // idle sessions to move out of their slots first
  int64_t total_tokens = 0;
};

StepPlan Schedule(const SchedInput& input, const SchedulerOptions& options);

}  // namespace linfer
