// One engine step, on the engine thread: take in new requests and cancellations, plan (sessions,
// admission, preemption), run the forward pass, sample, and finish requests. Only Intake and
// Publish take the mutex, and only to move data across threads.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/seq.h"
#include "kernels/transfer.h"

namespace linfer {

bool Engine::Step() {
  StepOutput out;
  std::vector<ScheduledSeq> plan;
  const absl::Time t0 = absl::Now();
  Intake(out);
  Plan(out, plan);
  const absl::Time t1 = absl::Now();
  // Admissions may have made the pool move saved states from slots to host RAM: snapshot time.
  const double planning_reclaims = reclaim_seconds_;
  if (!plan.empty()) Forward(plan, out);
  out.snapshot_seconds += std::exchange(reclaim_seconds_, 0.0);
  device_->arena().Reset();
  StepRecord record;
  record.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  record.scheduler_seconds = absl::ToDoubleSeconds(t1 - t0) - planning_reclaims;
  record.forward_seconds = out.forward_seconds;
  record.snapshot_seconds = out.snapshot_seconds;
  record.finished = out.finished;
  record.batch_size = static_cast<int>(plan.size());
  for (const ScheduledSeq& p : plan) record.tokens += p.tokens;
  std::function<void(const StepRecord&)> observer;
  {
    absl::MutexLock lock(&mu_);
    queued_ -= out.dequeued;
    queued_tokens_ -= out.dequeued_tokens;
    in_flight_ -= out.finished;
    EngineStats& s = stats_;
    s.prompt_tokens_total += out.prompt_tokens;
    s.generation_tokens_total += out.generation_tokens;
    s.cached_tokens_total += out.cached_tokens;
    s.preemptions_total += out.preemptions;
    s.state_copies = state_copies_;
    for (const auto& [why, n] : out.finished_by) s.finished_total[why] += n;
    s.waiting = static_cast<int>(waiting_.size()) + static_cast<int>(incoming_.size());
    s.running = static_cast<int>(running_.size());
    s.slots_used = SlotsInUse();
    if (graphs_ != nullptr) {
      s.graph_steps_total = graphs_->replays();
      s.graph_captures = graphs_->captures();
    }
    s.kv_blocks_used = KvBlocksInUse();
    s.prefix_cache = prefix_.stats();
    s.sessions = sessions_.counts();
    s.sessions_evicted_total = sessions_.evicted();
    if (!plan.empty()) {
      ++s.steps_total;
      s.step_tokens_total += record.tokens;
      s.step_seconds_total += record.seconds;
      s.scheduler_seconds_total += record.scheduler_seconds;
      s.forward_seconds_total += out.forward_seconds;
      s.snapshot_seconds_total += out.snapshot_seconds;
      s.last_batch_size = record.batch_size;
      observer = observer_;
    }
  }
  if (observer) observer(record);
  const bool progressed = !plan.empty() || !out.emits.empty() || out.dequeued > 0;
  for (StepOutput::Emit& e : out.emits) (*e.sink)(std::move(e.event));
  return progressed;
}

void Engine::Intake(StepOutput& out) {
  std::deque<std::unique_ptr<Seq>> incoming;
  std::map<RequestId, bool> cancels;
  std::map<RequestId, bool> pauses;
  bool stopping = false;
  absl::Status aborted;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(incoming_);
    cancels.swap(cancels_);
    pauses.swap(pauses_);
    stopping = stopping_;
    aborted = aborted_;
    abort_news_ = false;
  }
  for (std::unique_ptr<Seq>& s : incoming) {
    s->waiting_since = step_;
    waiting_.push_back(s->id);
    seqs_.emplace(s->id, std::move(s));
  }
  const absl::Time now = absl::Now();
  for (const auto& [id, deadline_passed] : cancels) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    if (deadline_passed) {
      it->second->req.deadline = std::min(it->second->req.deadline, now - absl::Nanoseconds(1));
    } else {
      it->second->cancelled = true;
    }
  }
  for (const auto& [id, paused] : pauses) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) it->second->paused = paused;
  }
  std::vector<RequestId> ids(waiting_.begin(), waiting_.end());
  ids.insert(ids.end(), running_.begin(), running_.end());
  for (RequestId id : ids) {
    Seq& s = *seqs_.at(id);
    if (s.cancelled || (stopping && aborted.ok())) {
      Finish(s, Finish::kCancelled, absl::CancelledError("request cancelled"), out);
    } else if (now > s.req.deadline) {
      Finish(s, Finish::kDeadline, absl::DeadlineExceededError("request deadline exceeded"), out);
    } else if (!aborted.ok()) {
      Finish(s, Finish::kError, aborted, out);
    }
  }
}

void Engine::Plan(StepOutput& out, std::vector<ScheduledSeq>& batch) {
  ++step_;
  for (RequestId id : std::vector<RequestId>(waiting_.begin(), waiting_.end())) {
    Seq& s = *seqs_.at(id);
    if (s.session_resolved) continue;
    s.session_resolved = true;
    if (absl::Status st = ResolveSession(s); !st.ok()) {
      Finish(s, Finish::kError, st, out);
    }
  }
  SchedInput in;
  in.step = step_;
  auto view = [&](const Seq& s, bool has_slot) {
    return SchedRequest{s.id,
                        s.req.priority,
                        s.arrival,
                        s.waiting_since,
                        static_cast<int64_t>(s.tokens.size()),
                        s.computed,
                        has_slot,
                        s.req.prompt_logprobs.has_value()};
  };
  for (RequestId id : running_) {
    const Seq& s = *seqs_.at(id);
    if (!s.paused || s.refeed) in.running.push_back(view(s, true));
  }
  for (RequestId id : waiting_) {
    const Seq& s = *seqs_.at(id);
    if (!s.paused || s.refeed) {
      in.waiting.push_back(view(s, s.session != nullptr && s.session->tier == Tier::kSlot));
    }
  }
  // Slots of the prefix cache's device tier count as free: the pool takes them back on demand.
  in.free_slots = pool_.available_slots();
  in.idle_session_slots = sessions_.idle_in_slots();
  // Prompt logprobs need the logits of every row of a prompt chunk: at most kPromptLogprobRows
  // such rows (beyond each chunk's last) in a step, and kPromptLogprobBytes of them.
  in.every_row_tokens =
      std::clamp<int64_t>(kPromptLogprobBytes / (4 * model_->vocab_size()), 1, kPromptLogprobRows);
  const StepPlan plan = Schedule(in, options_.scheduler);
  for (int i = 0; i < plan.offload_idle; ++i) sessions_.OffloadIdle();
  for (RequestId id : plan.preempted) Preempt(*seqs_.at(id));
  out.preemptions += static_cast<int64_t>(plan.preempted.size());
  // Hybrid models also need KV blocks: to bring a state back into a slot, and for the tokens of
  // this step. Sequences that got theirs are kept from preemption for the rest of the step.
  std::set<RequestId> keep;
  for (RequestId id : plan.admitted) {
    Seq& s = *seqs_.at(id);
    if (pool_.has_kv() && (s.session == nullptr || s.session->tier != Tier::kSlot ||
                           s.prefix != nullptr || s.slot_prefix > 0)) {
      const int64_t restore = RestorePosition(s);
      // A prefix snapshot's KV is shared, not copied in: a copy of its last block and one more.
      const bool pinned =
          (s.prefix && s.prefix->kv_pin) || (s.parked && s.parked->kv_pin) || s.slot_prefix > 0;
      // The restored positions and the next one (that block was +1 on top: a session within a
      // block of the cache's whole size could never come back, and waited for ever).
      const int64_t need = pinned ? 2 : pool_.kv_blocks_for(restore + 1);
      if (need > pool_.kv_total_blocks()) {  // can never be met: said at once
        Finish(s, Finish::kError,
               absl::ResourceExhaustedError(absl::StrCat(
                   s.req.session_id.empty() ? std::string("the request")
                                            : absl::StrCat("session '", s.req.session_id, "'"),
                   " needs ", need, " KV cache blocks to continue from ", restore,
                   " tokens; the cache has ", pool_.kv_total_blocks(), " of ",
                   pool_.kv_block_tokens(), " tokens (--kv_memory_mb)")),
               out);
        continue;
      }
      if (need > pool_.kv_free_blocks() && !MakeKvRoom(s, need, keep, out)) continue;
    }
    Admit(s, out);
  }
  for (const ScheduledSeq& sched : plan.scheduled) {
    auto it = seqs_.find(sched.id);
    if (it == seqs_.end() || it->second->slot < 0) continue;
    ScheduledSeq run = sched;
    Seq& s = *it->second;
    // A branch point ends a prompt chunk: the state there is saved for the prefix cache.
    if (s.branch_at > s.computed && s.computed + run.tokens > s.branch_at) {
      run.tokens = s.branch_at - s.computed;
    }
    if (pool_.has_kv() && !ReserveStepKv(s, run.tokens, keep, out)) continue;
    // A session's prompt that this step leaves unfinished (longer than a step's token budget, or
    // split because the budget is shared): its state from before the request is kept first, so
    // that a cancel, deadline or error before the prompt ends leaves the session as it was.
    if (s.session != nullptr && !s.checkpoint && s.computed == 0 &&
        s.computed + run.tokens < s.prompt_end) {
      KeepStateCopy(s, s.checkpoint);
    }
    keep.insert(run.id);
    batch.push_back(run);
  }
}

namespace {
// Whether `a` runs before `b`: lower priority value, then earlier arrival.
bool Outranks(const GenerateRequest& a, uint64_t a_arrival, const GenerateRequest& b,
              uint64_t b_arrival) {
  return a.priority != b.priority ? a.priority < b.priority : a_arrival < b_arrival;
}
}  // namespace

bool Engine::MakeKvRoom(const Seq& s, int64_t blocks, const std::set<RequestId>& keep,
                        StepOutput& out) {
  while (pool_.kv_free_blocks() < blocks) {
    if (prefix_.DropOnePinned()) continue;  // saved prefixes give their blocks back first
    if (sessions_.OffloadIdle()) continue;
    Seq* victim = nullptr;
    for (RequestId id : running_) {
      Seq& r = *seqs_.at(id);
      if (&r == &s || keep.contains(id) || r.slot < 0 || pool_.kv_held_blocks(r.slot) == 0 ||
          !Outranks(s.req, s.arrival, r.req, r.arrival)) {
        continue;
      }
      if (victim == nullptr || Outranks(victim->req, victim->arrival, r.req, r.arrival)) {
        victim = &r;
      }
    }
    if (victim == nullptr) return false;
    Preempt(*victim);
    if (victim->slot >= 0) return false;  // could not be preempted
    ++out.preemptions;
  }
  return true;
}

bool Engine::ReserveStepKv(Seq& s, int64_t& tokens, const std::set<RequestId>& keep,
                           StepOutput& out) {
  const int64_t from = pool_.position(s.slot);
  for (;;) {
    const absl::Status st = pool_.ReserveKv(ctx_, s.slot, from + tokens, from);
    if (st.ok()) return true;
    if (!absl::IsResourceExhausted(st)) {
      Finish(s, Finish::kError, st, out);
      return false;
    }
    // Room for all of them, else for fewer.
    if (MakeKvRoom(s, pool_.kv_blocks_to_reserve(s.slot, from + tokens, from), keep, out)) {
      continue;
    }
    if (tokens > 1) {
      tokens = std::max<int64_t>(1, tokens / 2);
      continue;
    }
    // Not even one token: the sequence waits (offloaded) until blocks come back.
    Preempt(s);
    if (s.slot < 0) ++out.preemptions;
    return false;
  }
}

absl::Status Engine::ResolveSession(Seq& s) {
  if (!s.req.session_id.empty()) {
    ASSIGN_OR_RETURN(s.session, sessions_.Acquire(s.req.session_id, s.owner_tag));
    s.session_pending = s.session->pending;  // Finish gives it back when this request fails
    if (s.session->pending) s.tokens.push_back(*s.session->pending);
    const int64_t held = sessions_.Info(*s.session).position;
    if (s.req.session_history && *s.req.session_history != held) {
      return absl::AbortedError(absl::StrCat(
          "session '", s.req.session_id, "' changed while this request was prepared: it held ",
          *s.req.session_history, " tokens then and holds ", held,
          " now (another request on it ended, or it was replaced, in between); send the "
          "request again"));
    }
  }
  s.tokens.insert(s.tokens.end(), s.req.prompt.begin(), s.req.prompt.end());
  s.prompt_end = static_cast<int64_t>(s.tokens.size());
  if (s.session != nullptr && options_.detokenizer) {
    // The output's text continues the session's: its last tokens, the pending one, the prompt
    // (of which the detokenizer reads the last few).
    std::vector<int32_t> context = s.session->text_tail;
    const size_t own = std::min(s.tokens.size(), kMaxTextTail);
    context.insert(context.end(), s.tokens.end() - static_cast<ptrdiff_t>(own), s.tokens.end());
    s.detok = options_.detokenizer(context);
    if (options_.encoder && !s.req.stop.stop_strings.empty() && !s.req.prefill_only &&
        !s.req.temporary_session) {
      s.trace.emplace();
    }
  }
  const int64_t history = s.session == nullptr             ? 0
                          : s.session->tier == Tier::kSlot ? pool_.position(s.session->slot)
                                                           : s.session->position;
  const int64_t max_model_len = options_.max_model_len;
  if (history + s.prompt_end + s.req.stop.max_tokens > max_model_len) {
    // The session holds its pending token too (Sessions.Get's tokens): counted there.
    const int64_t pending = s.session_pending ? 1 : 0;
    return ContextLengthError(max_model_len, history + pending, s.prompt_end - pending,
                              s.req.stop.max_tokens);
  }
  if (s.tokens.empty()) return absl::InvalidArgumentError("prompt is empty");
  ResumeFromPrefix(s);
  return absl::OkStatus();
}

int64_t Engine::RestorePosition(const Seq& s) {
  int64_t p = s.session != nullptr ? s.session->position : s.parked ? s.parked->position : 0;
  if (s.prefix) p = std::max(p, s.prefix->position);
  return p;
}

void Engine::ResumeFromPrefix(Seq& s) {
  // A session's first request (empty state, nothing pending) may start from a prefix too.
  const bool fresh_session =
      s.session != nullptr && !s.session_pending &&
      (s.session->tier == Tier::kSlot ? pool_.position(s.session->slot) : s.session->position) == 0;
  if (!prefix_.enabled() || (s.session != nullptr && !fresh_session)) return;
  if (s.req.prompt_logprobs) return;  // every prompt row's logits are wanted
  PrefixHit hit;
  // At least one prompt token is computed: its logits give the first sampled token.
  const bool found = prefix_.Lookup(s.prefix_tag, s.tokens, 1, s.prompt_end - 1, &hit);
  // (A fresh session's first prompt too: its tokens are its whole history.)
  s.branch_at = prefix_.BranchPoint(s.prefix_tag, s.tokens, found ? hit.len : 0, s.prompt_end - 1);
  if (!found) return;
  // Saved in a slot: copied device to device when admitted (LoadSlotPrefix; a one-off with no
  // slot free takes that slot over; a session copies it into its own slot).
  if (hit.slot >= 0) s.slot_prefix = hit.len;
  s.computed = hit.len;
  s.last_snapshot = hit.len;
  if (s.session != nullptr) {
    s.prefix = std::move(hit.state);
  } else if (hit.state) {
    s.parked = std::move(hit.state);
  }
}

absl::Status Engine::LoadSlotPrefix(Seq& s) {
  const absl::Span<const int32_t> key(s.tokens.data(), static_cast<size_t>(s.slot_prefix));
  s.slot_prefix = 0;
  const int src = prefix_.SlotOf(s.prefix_tag, key);
  if (s.session != nullptr) {  // into the session's own slot (s.slot: admitted, empty)
    if (src >= 0) return pool_.Copy(ctx_, src, s.slot);
    return CopyPrefixIn(s, key, s.slot);
  }
  if (src >= 0 && pool_.free_slots() == 0) {  // none free: the saved slot itself
    s.slot = prefix_.TakeSlot(s.prefix_tag, key);
    return absl::OkStatus();
  }
  if (src >= 0) {  // a slot is free, so the pool reclaims none (src stays)
    ASSIGN_OR_RETURN(s.slot, pool_.Duplicate(ctx_, src));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int slot, pool_.Allocate(ctx_));
  if (slot < 0) return absl::InternalError("no free slot although the plan had one");
  s.slot = slot;
  return CopyPrefixIn(s, key, slot);
}

absl::Status Engine::CopyPrefixIn(Seq& s, absl::Span<const int32_t> key, int slot) {
  // The saved state left the slots since the request was planned: from host RAM (where the pool
  // moved it), else from the start (its planned tokens are then the prompt's first ones).
  PrefixHit hit;
  const int64_t len = static_cast<int64_t>(key.size());
  if (prefix_.Lookup(s.prefix_tag, key, len, len, &hit)) {
    if (hit.slot >= 0) return pool_.Copy(ctx_, hit.slot, slot);
    return pool_.CopyIn(ctx_, *hit.state, slot);
  }
  s.computed = 0;
  s.last_snapshot = 0;
  return absl::OkStatus();
}

void Engine::Admit(Seq& s, StepOutput& out) {
  absl::Status st;
  if (s.session != nullptr && s.session->tier == Tier::kSlot) {
    s.slot = s.session->slot;
  } else if (s.slot_prefix > 0 && s.session == nullptr) {
    st = LoadSlotPrefix(s);
    if (!st.ok() && s.slot >= 0) {
      pool_.Free(s.slot);
      s.slot = -1;
    }
  } else {
    absl::StatusOr<int> slot = pool_.Allocate(ctx_);
    st = !slot.ok()  ? slot.status()
         : *slot < 0 ? absl::InternalError("no free slot although the plan had one")
                     : absl::OkStatus();
    if (st.ok()) {
      s.slot = *slot;
      if (s.session != nullptr) {
        st = sessions_.Restore(s.session, s.slot);
      } else if (s.parked) {
        st = pool_.CopyIn(ctx_, *s.parked, s.slot);
        s.parked.reset();
      }
      if (!st.ok()) {
        pool_.Free(s.slot);
        s.slot = -1;
      }
    }
  }
  if (st.ok() && (s.prefix || s.slot_prefix > 0)) {
    // The session was empty: its checkpoint is the empty state (no bytes: nothing to copy out),
    // the prefix goes on top.
    s.checkpoint = StateCopy();
    st = s.prefix ? pool_.CopyIn(ctx_, *s.prefix, s.slot) : LoadSlotPrefix(s);
    s.prefix.reset();
  }
  if (!st.ok()) {
    Finish(s, Finish::kError, st, out);
    return;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
  running_.push_back(s.id);
  if (!s.admitted_once) {
    s.admitted_once = true;
    s.scheduled = absl::Now();
    s.cached = pool_.position(s.slot);
    out.dequeued += 1;
    out.dequeued_tokens += static_cast<int64_t>(s.req.prompt.size());
    out.prompt_tokens += static_cast<int64_t>(s.req.prompt.size());
    out.cached_tokens += s.cached;
  }
}

void Engine::Preempt(Seq& s) {
  ParkStateCopies(s);  // slots are short
  absl::Status st;
  if (s.session != nullptr) {
    st = sessions_.Park(s.session);  // slot → host RAM, freeing the slot
  } else {
    HostState parked;
    st = pool_.CopyOut(ctx_, s.slot, &parked);
    if (st.ok()) {
      s.parked = std::make_shared<const HostState>(std::move(parked));
      pool_.Free(s.slot);
    }
  }
  if (!st.ok()) {
    Log(LogLevel::kError, absl::StrCat("preempting request ", s.id, ": ", st.ToString()));
    return;
  }
  s.slot = -1;
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  waiting_.push_front(s.id);
  s.waiting_since = step_;  // (aging counts waiting, not running)
}

}  // namespace linfer
