// Schedule(): budgeted, priority-ordered, chunked-prefill step planning.
#include "engine/scheduler.h"

#include <algorithm>
#include <unordered_map>

namespace linfer {
namespace {

// Priority after aging: waiting long enough moves a request ahead.
int64_t Effective(const SchedRequest& r, const SchedInput& in, const SchedulerOptions& o) {
  const uint64_t waited = in.step > r.waiting_since ? in.step - r.waiting_since : 0;
  return r.priority -
         static_cast<int64_t>(waited / static_cast<uint64_t>(std::max(1, o.aging_steps)));
}

bool Before(const SchedRequest& a, int64_t pa, const SchedRequest& b, int64_t pb) {
  return pa != pb ? pa < pb : a.arrival < b.arrival;
}

}  // namespace

StepPlan Schedule(const SchedInput& in, const SchedulerOptions& options) {
  StepPlan plan;
  int64_t budget = options.max_step_tokens;
  // Running requests in priority order (running ones do not age).
  std::vector<const SchedRequest*> running;
  for (const auto& r : in.running) running.push_back(&r);
  std::sort(running.begin(), running.end(), [](const SchedRequest* a, const SchedRequest* b) {
    return Before(*a, a->priority, *b, b->priority);
  });
  std::vector<const SchedRequest*> waiting;
  for (const auto& r : in.waiting) waiting.push_back(&r);
  std::sort(waiting.begin(), waiting.end(), [&](const SchedRequest* a, const SchedRequest* b) {
    return Before(*a, Effective(*a, in, options), *b, Effective(*b, in, options));
  });

  // Admission first decides who runs; tokens are handed out afterwards.
  int free_slots = in.free_slots, idle = in.idle_session_slots;
  std::vector<const SchedRequest*> admitted;
  std::vector<const SchedRequest*> kept = running;
  // A request that finds no slot does not hold up the ones after it: those whose state already
  // sits in a slot (a session's turn) take nothing it waits for, and the slot it waits for may be
  // the session of one of them (it frees when that turn ends); those that may preempt by their
  // own priority do so.
  for (const SchedRequest* w : waiting) {
    if (static_cast<int>(kept.size()) >= options.max_running ||
        static_cast<int64_t>(kept.size()) >= options.max_step_tokens) {
      break;  // every running sequence needs at least one token of the budget
    }
    if (!w->has_slot) {
      if (free_slots > 0) {
        --free_slots;
      } else if (idle > 0) {
        --idle;
        ++plan.offload_idle;
      } else {
        // Preempt the lowest-priority request that was running before this step, if its
        // priority is strictly lower than this one's own. Aging orders the waiting queue (no
        // request waits for ever behind later, more urgent ones) but never preempts: with every
        // priority equal (first come, first served) nothing is preempted.
        const SchedRequest* worst = nullptr;
        for (const SchedRequest* r : kept) {
          const bool was_running = std::find(running.begin(), running.end(), r) != running.end();
          if (was_running &&
              (worst == nullptr || Before(*worst, worst->priority, *r, r->priority))) {
            worst = r;
          }
        }
        if (worst == nullptr || worst->priority <= w->priority) continue;
        plan.preempted.push_back(worst->id);
        kept.erase(std::find(kept.begin(), kept.end(), worst));
      }
    }
    plan.admitted.push_back(w->id);
    admitted.push_back(w);
    kept.push_back(w);
  }

  // Tokens: one for every sequence first (so decoding never stalls behind prompts), then the
  // rest of each sequence's remainder in priority order (prompt chunks; by the requests' own
  // priorities: a running request does not age).
  std::vector<const SchedRequest*> order;
  for (const SchedRequest* r : kept) {
    if (r->target > r->computed) order.push_back(r);
  }
  std::stable_sort(order.begin(), order.end(), [](const SchedRequest* a, const SchedRequest* b) {
    return Before(*a, a->priority, *b, b->priority);
  });
  std::unordered_map<uint64_t, int64_t> tokens;
  for (const SchedRequest* r : order) {
    if (budget == 0) break;
    tokens[r->id] = 1;
    --budget;
  }
  int64_t every_row_left = in.every_row_tokens;
  for (const SchedRequest* r : order) {
    if (budget == 0) break;
    auto it = tokens.find(r->id);
    if (it == tokens.end()) continue;
    int64_t more = std::min(budget, r->target - r->computed - it->second);
    if (r->every_row) {
      more = std::min(more, every_row_left);
      every_row_left -= more;
    }
    it->second += more;
    budget -= more;
  }
  for (const SchedRequest* r : order) {
    auto it = tokens.find(r->id);
    if (it == tokens.end()) continue;
    plan.scheduled.push_back({r->id, it->second});
    plan.total_tokens += it->second;
  }
  return plan;
}

}  // namespace linfer
