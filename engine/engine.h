// The engine: one thread owns the model, the slot pool and the sessions, and runs steps;
// submitters get a RequestId and receive TokenEvents through their sink. Session requests run as
// tasks on the engine thread (device copies stay on its stream). The mutex guards only the hand-
// over queues and counters: planning state, forward passes, sampling, detokenisation, stop checks
// and disk I/O all run without it. Every public method is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "engine/decode_graphs.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/session_store.h"
#include "engine/state_blob.h"
#include "engine/state_pool.h"
#include "kernels/context.h"
#include "kernels/device_context.h"
#include "kernels/op_timer.h"
#include "models/model.h"

namespace linfer {

struct EngineOptions {
  int64_t state_memory_bytes = int64_t{1} << 30;  // slot pool budget
  int max_slots = 0;                              // > 0 caps the slot count
  TierOptions tiers;
  SchedulerOptions scheduler;
  int max_waiting = 1024;  // queued requests beyond this: ResourceExhausted
  // Requests may carry a priority (vLLM's --scheduling-policy priority); false (fcfs) refuses a
  // request whose priority is not 0, so that no client can put itself ahead of the others.
  bool priority_scheduling = true;
  int64_t max_waiting_tokens = 1 << 22;  // queued prompt tokens beyond this: ResourceExhausted
  // Paged KV cache of hybrid models' full-attention layers (ignored for recurrent-only models).
  int64_t kv_memory_bytes = int64_t{1} << 30;
  int kv_block_tokens = 16;
  // States saved by prefix for requests without a session (off by default here; the server's
  // --prefix_cache_mb turns it on).
  PrefixCacheOptions prefix_cache = MakePrefixCacheOptions(0, 1024);
  // Tokens a sequence may hold (history + new). 0: the model's max_position_embeddings (else
  // 2^20), capped by what the KV cache holds for one sequence; an explicit value the KV cache
  // cannot hold is refused.
  int64_t max_model_len = 0;
  int max_new_tokens = 1 << 16;  // largest max_tokens a request may ask for
  int chunk_size = 64;           // recurrence chunk size
  // Every row computed the same way whatever shares its step (ExecContext::batch_invariant): a
  // request resumed from a session or the prefix cache is bit-identical to computing it cold.
  bool batch_invariant = false;
  // The device pre-sampler (kernels/presample.h): a request whose sampling its K best logits
  // decide (Sampler::SamplesFromTop: greedy, top-k ≤ K, min-p; no bias or penalty) gets only
  // those and the row's log-sum-exp back from the device, not its vocabulary-wide row; one that
  // draws over the whole row (temperature alone, top-p alone) also gets the device's draw, made
  // with the uniform its sampler drew ahead, and its weight sum. The host sampler then gives the
  // same token from the same seed. kAuto: on with CUDA (on the CPU the logits are in host memory
  // already).
  enum class Presampling { kAuto, kOn, kOff };
  Presampling presample = Presampling::kAuto;
  // CUDA: decode-only steps replay CUDA graphs captured per padded batch size (engine/
  // decode_graphs.h; one slot is kept for padding rows). false: every step eager (vLLM's
  // --enforce-eager). Ignored on the CPU.
  bool cuda_graphs = true;
  // Diagnostics (engine_benchmark --op_times): every decode-only step's forward pass and
  // pre-sampling run in a window of this timer (kernels/op_timer.h: per-op GPU time), but the
  // first of each batch size. CUDA with cuda_graphs off only (Create refuses it otherwise); not
  // owned, outlives the engine.
  OpTimer* op_timer = nullptr;
  // Diagnostics (engine_benchmark --op_times --prefill): every step in which some row carries
  // more than one token (a prompt chunk: a prefill or mixed step, never graphed) runs in a window
  // of this timer without its gate (OpTimer::Gate::kNone: each launch timed as the host launches
  // it, which a prefill step's long kernels keep ahead of). A step of one token a row (decode, a
  // 1-token prompt) counts as decode-only, as the CUDA graphs take it. CUDA only, graphs on or
  // off; not owned, outlives the engine. May be op_timer itself (their windows never overlap).
  OpTimer* prefill_op_timer = nullptr;
  DetokenizerFactory detokenizer;  // null: no text (and no stop strings)
  // A session turn ended by a stop string leaves the state holding the reply's visible text only,
  // as if the client had sent it back: the tokens from the stop string on are taken out (while
  // text is held back as a possible stop string's start, a copy of the state from before it is
  // kept; the state goes back to it and the visible tokens are fed again), and the text of a token
  // the stop string cuts is encoded with this. Null: the stop string's tokens stay in the state.
  TextEncoder encoder;
  absl::Duration housekeeping = absl::Seconds(1);  // session expiry checks while idle
  // A warm-up step before the engine takes requests: the step's whole token budget
  // (max_step_tokens, in prompts of at most max_model_len tokens, each in a free slot cleared
  // after) through the model. It sizes the step's scratch arena to what such a step needs, with
  // some room (a step of the same tokens then allocates nothing: it cannot fail part-way for want
  // of device memory that was free at start — the logits buffer of prompt logprobs and the CUDA
  // graphs' own arenas aside), loads the kernels and picks the GEMMs' algorithms for the prefill's
  // shapes, and makes a budget that leaves no room for the step's activations fail Create, naming
  // --max_step_tokens, rather than the first long prompt (vLLM's profile run, in spirit). Unset:
  // on CUDA only.
  std::optional<bool> warm_up;
  // Tests: called after each step's forward pass (the states have moved) with the step's number;
  // an error fails the step as the device would have (kernels/device_lost.h DeviceLostError: as a
  // lost device). Null in production.
  std::function<absl::Status(uint64_t step)> forward_fault;
};

// "auto", "on" or "off" (the --presample flag); InvalidArgument naming the value otherwise.
absl::StatusOr<EngineOptions::Presampling> ParsePresampling(absl::string_view name);

// The copies of a session's state the engine keeps to go back to (a turn's state while its
// reply's text is held back, Seq::clean_state; its state before a prompt longer than one step,
// Seq::checkpoint): into a free slot, into host RAM, and slot copies moved to host RAM when the
// pool needed their slot.
struct StateCopyCounts {
  int64_t slot = 0, host = 0, moved = 0;
};

// Counters (monotonic) and gauges for the metrics layer.
struct EngineStats {
  int waiting = 0, running = 0;
  int slots_used = 0, slots_total = 0;
  int64_t state_bytes_per_sequence = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0, kv_bytes_per_block = 0;
  PrefixCacheStats prefix_cache;
  TierCounts sessions;
  int64_t sessions_evicted_total = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0, cached_tokens_total = 0;
  int64_t preemptions_total = 0;
  StateCopyCounts state_copies;                   // totals
  std::map<std::string, int64_t> finished_total;  // by FinishName
  int64_t steps_total = 0, step_tokens_total = 0;
  double step_seconds_total = 0, scheduler_seconds_total = 0;
  // Of step_seconds_total: the forward pass through its logits' (or candidates') download, and the
  // prefix cache's state snapshots (device to host) after it. The rest is sampling and emitting.
  double forward_seconds_total = 0, snapshot_seconds_total = 0;
  int last_batch_size = 0;
  // CUDA graphs: decode steps replayed, and graphs captured (one per batch bucket and KV width).
  int64_t graph_steps_total = 0, graph_captures = 0;
};

// Per step, for histograms (called on the engine thread).
struct StepRecord {
  // forward: the forward pass through its logits' download (EngineStats::forward_seconds_total);
  // snapshots: saving prefix-cache states (EngineStats::snapshot_seconds_total).
  double seconds = 0, scheduler_seconds = 0, forward_seconds = 0, snapshot_seconds = 0;
  int batch_size = 0;
  int64_t tokens = 0;
  int64_t finished = 0;  // requests that ended in this step
};

// InvalidArgument for a priority other than 0 unless `options` schedule by priority (vLLM's
// --scheduling-policy): the engine's check, which the front ends also make before any session work.
absl::Status CheckPriority(const EngineOptions& options, int priority);

// The error for a sequence past max_model_len, worded as vLLM's and OpenAI's, which clients
// (LiteLLM, agents trimming their history) recognise by "maximum context length".
absl::Status ContextLengthError(int64_t max_model_len, int64_t history, int64_t prompt,
                                int64_t max_tokens);

// The disk directories an engine with `options` writes into (the sessions' disk tier; the prefix
// cache's when it has a budget), each checked (PrepareDirectory: made when missing) and locked for
// one server: a directory another process holds is FailedPrecondition naming its flag. Both tiers
// may share one directory. Engine::Create takes them itself; a caller with a slow model load ahead
// takes them first and passes them on, so that a second server is refused before it loads weights.
struct DiskDirectories {
  std::vector<DirectoryLock> locks;
  std::vector<std::filesystem::path> paths;  // canonical, one per lock
};
// Adds to `held` the directories of `options` it does not lock yet.
absl::StatusOr<DiskDirectories> LockDiskDirectories(const EngineOptions& options,
                                                    DiskDirectories held = {});

class Engine {
 public:
  // Resolves options.max_model_len (see EngineOptions). `held`: the directories a caller locked
  // already (LockDiskDirectories); those of `options` missing from it are locked here.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        EngineOptions options,
                                                        DiskDirectories held = {});
  ~Engine();  // Stop()s

  const Model& model() const { return *model_; }
  int num_slots() const { return num_slots_; }
  const EngineOptions& options() const { return options_; }
  // The largest exported state blob this engine's model can have (imports beyond are refused).
  int64_t max_state_blob_bytes() const {
    return MaxStateBlobBytes(BlobModel{model_->fingerprint(), &model_->state_specs(),
                                       model_->vocab_size(), options_.max_model_len});
  }

  // Validates and queues. Errors: InvalidArgument (names the field), ResourceExhausted (queue
  // full), Unavailable (stopping). Session problems (NotFound, FailedPrecondition when busy)
  // arrive as the request's final event, with Finish::kError.
  absl::StatusOr<RequestId> Submit(GenerateRequest request, EventSink sink);
  // Cancels at the next step; the request's final event has Finish::kCancelled, or kDeadline when
  // `deadline_passed` (a front end whose transport ended the call at its deadline: gRPC's timer
  // may fire a hair before the engine's own). No-op if done.
  void Cancel(RequestId id, bool deadline_passed = false);
  // A paused request keeps its place but is not scheduled (its client is not reading).
  void SetPaused(RequestId id, bool paused);

  // Session requests (run on the engine thread). An empty id asks for a fresh random one; the
  // id used is returned. `owner` scopes ids: another owner's sessions do not exist for it.
  // `info`, when given, receives the new session's description from the same engine task (a
  // later GetSession could find it deleted or evicted already).
  absl::StatusOr<std::string> CreateSession(const std::string& id, const std::string& owner,
                                            SessionInfo* info = nullptr);
  // A session of the server's own for `owner` (the OpenAI front end's n > 1 choices), with a
  // fresh id: outside the owner's quotas and ListSessions (SessionStore::Session::internal). Its
  // user deletes it. ForkInternalSession: a fork of one, the same kind (ForkSession makes a
  // client's, whatever the source).
  absl::StatusOr<std::string> CreateInternalSession(const std::string& owner);
  absl::StatusOr<std::string> ForkInternalSession(const std::string& src, const std::string& owner);
  absl::StatusOr<SessionInfo> GetSession(const std::string& id, const std::string& owner);
  // GetSession for a client's new turn on the session: also refused while a request runs on it
  // (FailedPrecondition: what the turn is prepared against would change when that one ends) and
  // while the owner's sessions have grown past its byte quota (ResourceExhausted,
  // SessionStore::CheckGrownQuota). The turn's GenerateRequest::session_history is the position.
  absl::StatusOr<SessionInfo> SessionForTurn(const std::string& id, const std::string& owner);
  absl::StatusOr<std::vector<SessionInfo>> ListSessions(const std::string& owner);
  absl::StatusOr<std::string> ForkSession(const std::string& src, const std::string& dst,
                                          const std::string& owner, SessionInfo* info = nullptr);
  absl::Status DeleteSession(const std::string& id, const std::string& owner);
  // Drops every state the prefix cache holds (their KV blocks go back to the pool).
  absl::Status ResetPrefixCache();
  absl::StatusOr<std::string> ExportSession(const std::string& id, const std::string& owner);
  absl::StatusOr<std::string> ImportSession(const std::string& id, const std::string& owner,
                                            absl::string_view blob, SessionInfo* info = nullptr);

  EngineStats Stats();
  void SetStepObserver(std::function<void(const StepRecord&)> observer);
  // Bytes moved host↔device by the step loop (tokens and segment tables in, logits or pre-sampled
  // candidates out).
  TransferStats& transfers() { return device_->transfers(); }
  // Whether steps pre-sample on the device (EngineOptions::presample resolved), and with what K.
  bool presampling() const { return presample_k_ > 0; }
  int presample_k() const { return presample_k_; }

  // Stops accepting, lets queued and running requests finish for up to `grace`, then cancels
  // the rest, writes every session to the disk tier (when there is one) and joins the engine
  // thread. Idempotent.
  void Stop(absl::Duration grace = absl::ZeroDuration());
  // After Stop(): whether writing the sessions to the disk tier failed (ok when it worked or
  // there is no disk tier), so that a server can exit with an error status.
  absl::Status persist_status() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every queued and running request at the next step with the error `why` (their tokens so
  // far are out first; a session keeps what it was fed, as with any error), and refuses new ones
  // with it: a drain whose time ran out tells its clients so, before their calls are cut.
  void Abort(absl::Status why);
  bool idle();  // nothing queued or running
  // Called once when a step (or a session RPC's state copy: on its caller's thread once the
  // engine's has ended) finds the device lost (kernels/device_lost.h):
  // the engine has then Abort()ed with `why` (Unavailable, naming the device's error) and the
  // process cannot use the device again — the server exits so that its supervisor restarts it.
  void SetDeviceLostObserver(std::function<void(const absl::Status& why)> observer);

 private:
  struct Seq;
  struct StateCopy;
  struct StepOutput;
  Engine(std::unique_ptr<Model> model, EngineOptions options, int slots,
         std::unique_ptr<DeviceContext> device, StatePool pool, std::vector<DirectoryLock> locks);
  void StartGraphs();  // Start: the padding slot and DecodeGraphs (logs why not)
  // Create: EngineOptions::warm_up's step (an error names the step budget), then the graphs
  // (`graphs`: keep one slot of the pool for padding and replay decode steps as CUDA graphs) and
  // the engine thread.
  absl::Status WarmUp();
  void Start(bool graphs);
  // The pool's slots and KV blocks in use, less the padding slot's.
  // Slots held by sequences and sessions and their turns' state copies (not the padding slot, not
  // the prefix cache's).
  int SlotsInUse() const {
    return pool_.used_slots() - (pad_slot_ >= 0 ? 1 : 0) -
           static_cast<int>(prefix_.device_entries());
  }
  int64_t KvBlocksInUse() const {
    return pool_.kv_total_blocks() - pool_.kv_free_blocks() -
           (pad_slot_ >= 0 ? pool_.kv_held_blocks(pad_slot_) : 0);
  }
  void Loop();
  // Runs `task` on the engine thread and waits for it; once the thread has exited, runs it on
  // the caller's thread (serialised with other such calls).
  absl::Status RunOnEngine(std::function<void()> task);
  void RefreshGauges();  // pool and session gauges into stats_ (engine thread, or after stop)

  // Engine thread only (engine_step.cc).
  // One engine step; whether it did anything (ran a forward pass, ended or took in a request).
  bool Step();
  void Intake(StepOutput& out);
  void Plan(StepOutput& out, std::vector<ScheduledSeq>& batch);
  absl::Status ResolveSession(Seq& s);  // a new request's session and full token list
  void Admit(Seq& s, StepOutput& out);
  void Preempt(Seq& s);
  // KV blocks (hybrid models): frees room for `blocks` more by offloading idle sessions, then by
  // preempting running sequences that `s` outranks and that hold blocks (never one in `keep`).
  bool MakeKvRoom(const Seq& s, int64_t blocks, const std::set<RequestId>& keep, StepOutput& out);
  // Reserves the KV of a scheduled sequence's next `tokens` (may shrink them); false: none fit
  // (the sequence is preempted, or finished on an error).
  bool ReserveStepKv(Seq& s, int64_t& tokens, const std::set<RequestId>& keep, StepOutput& out);
  void Forward(const std::vector<ScheduledSeq>& plan, StepOutput& out);
  // The error a request (or a session RPC's state copy) that failed with `error` ends with
  // (Finish). When `error` says the device is lost (kernels/device_lost.h), the first time:
  // Abort() with an Unavailable status that says so to the clients, the session store told
  // (SessionStore::LoseDevice), and the observer; that status from then on. Any other error is
  // returned as it is and leaves the engine running.
  absl::Status LoseDeviceIf(const absl::Status& error);
  // Prompt logprobs (GenerateRequest::prompt_logprobs): the entries of `s`'s chunk of `tokens`
  // tokens from its rows' whole logits in host_logits_ — the chunk's last row is logits row
  // `own`, the others rows `extra`, `extra` + 1, … Before s.computed moves past the chunk.
  void CollectPromptLogprobs(Seq& s, int64_t tokens, int64_t own, int64_t extra);
  // The most logits rows beyond each segment's last that prompt logprobs add to one step: 512,
  // and 128 MiB of f32 logits (≈ 135 rows of a 248k vocabulary) — on the device, in host memory,
  // and the engine thread's log-softmax over them.
  static constexpr int64_t kPromptLogprobRows = 512;
  static constexpr int64_t kPromptLogprobBytes = int64_t{128} << 20;
  // EngineOptions::op_timer / prefill_op_timer: a window around a decode-only step's (a prompt
  // step's) forward pass and pre-sampling (a failure to open or close is logged; the step goes on).
  void OpenOpTimer(const std::vector<ScheduledSeq>& plan);
  void CloseOpTimer();
  // What comes back from the device for each row of a step's logits: nothing (a prompt chunk that
  // does not end its prompt, a prefill-only request), its K best (pre-sampled), its K best and a
  // draw over the whole row with the uniform its sampler drew ahead (pre-sampled with a draw), or
  // the whole row.
  enum class RowNeed : uint8_t { kNothing, kTop, kDraw, kRow };
  // Per row, its 1/temperature and uniform bits (read for kDraw rows only).
  struct DrawIn {
    float inv_temperature = 0.0f;
    uint64_t bits = 0;
  };
  // Queues the upload of the kDraw rows' inputs (from host_draw_in_) into step scratch: an empty
  // view when no row draws.
  absl::StatusOr<TensorView> UploadDraws(const std::vector<RowNeed>& need,
                                         const std::vector<DrawIn>& draw_in);
  // Queues the copies of what `need` asks for into host_logits_ / host_top_ (not synchronized);
  // draw_inputs: UploadDraws' view.
  absl::Status FetchRows(const TensorView& logits, const std::vector<RowNeed>& need,
                         const TensorView& draw_inputs);
  absl::StatusOr<SampleResult> SampleRow(Seq& s, const TensorView& logits, int64_t row,
                                         RowNeed need);
  // SampleRow's structured output: the sampler draws from the constraint's mask (PrepareMasks'),
  // stop tokens allowed only once the output is complete. Token -1: the output is complete and
  // nothing may follow it, not even a stop token (it ends with kStop).
  absl::StatusOr<SampleResult> SampleConstrained(Seq& s, absl::Span<const float> row);
  static absl::Status AdvanceFreeConstraint(Seq& s, int32_t token);
  // The token masks of this step's constrained rows, made while the device computes the step
  // (on the CPU it has already), in parallel across rows (OpenMP).
  void PrepareMasks(const std::vector<Seq*>& seqs, const std::vector<RowNeed>& need);
  void Emit(Seq& s, SampleResult r, StepOutput& out);
  void Finish(Seq& s, linfer::Finish why, absl::Status error, StepOutput& out,
              TokenEvent event = {});
  bool RollBack(Seq& s);  // false: the copy could not be put back (logged)
  // A session turn with stop strings (session_reply.h): records a token's text (and the state from
  // before the held-back text, while there is some); once a stop string ends the reply, arranges
  // for the state to hold the visible reply only — true when tokens must be fed again first (the
  // final event is then held: EndRefeed finishes the request once they are in, or when it is cut
  // short — a cancel, deadline or engine stop ends it as it was going to end, an error with it).
  void TraceReply(Seq& s, const std::string& delta, const StopOutput& stop);
  // Copies of a session's state to go back to (state_copy.cc): the state before a prompt that
  // takes several steps (Seq::checkpoint; RollBack restores it), the state from before a reply's
  // held-back text (Seq::clean_state, TraceReply). KeepStateCopy puts one in a free slot (device
  // to device) while more slots are free than requests wait, else in host memory. ParkStateCopy
  // moves one in a slot to host memory and frees its slot (the pool's reclaimer, and a preempted
  // sequence's: ParkStateCopies, both of a sequence's); DropStateCopy frees what it holds;
  // RestoreStateCopy puts the session's state back (device to device where both are in slots).
  void KeepStateCopy(Seq& s, std::optional<StateCopy>& copy);
  bool ParkStateCopy(Seq& s, std::optional<StateCopy>& copy);
  bool ParkStateCopies(Seq& s);
  bool ParkAStateCopy();  // the first sequence's that holds one in a slot; false: none does
  void DropStateCopy(std::optional<StateCopy>& copy);
  absl::Status RestoreStateCopy(Seq& s, std::optional<StateCopy>& copy);
  bool TrimSessionReply(Seq& s, linfer::Finish why, TokenEvent& event);
  void EndRefeed(Seq& s, StepOutput& out, absl::Status error = absl::OkStatus());
  // Prefix cache: resumes a new request from the longest saved prefix of its prompt; saves the
  // state of a one-off sequence at `computed` tokens (its time goes to out.snapshot_seconds).
  void ResumeFromPrefix(Seq& s);
  // Admission of a request whose prefix is saved in a slot (Seq::slot_prefix). A one-off: a copy
  // of that slot into a free one, or, with none free, the slot itself; sets s.slot (on an error
  // too, when it has one). A session's first request: a copy into its slot, s.slot.
  absl::Status LoadSlotPrefix(Seq& s);
  // The prefix key's saved state into `slot` from wherever the cache holds it now, or none (s
  // then starts from its first token).
  absl::Status CopyPrefixIn(Seq& s, absl::Span<const int32_t> key, int slot);
  void SavePrefix(Seq& s, StepOutput& out);
  // At a one-off request's end: its slot goes to the prefix cache's device tier as it is (true),
  // or (no device tier) its state is copied to host RAM and the caller frees the slot (false).
  bool KeepPrefixSlot(Seq& s, StepOutput& out);
  // Tokens a sequence's state holds once it is back in a slot (for KV admission).
  static int64_t RestorePosition(const Seq& s);
  void Publish(const StepRecord& record, bool stepped);
  bool HasLocalWork() const { return !waiting_.empty() || !running_.empty(); }

  std::vector<DirectoryLock> locks_;  // the disk tiers' directories, released last
  std::unique_ptr<Model> model_;
  EngineOptions options_;
  const int num_slots_;
  // Engine-thread state: the device context, pool, sessions and the requests it holds.
  std::unique_ptr<DeviceContext> device_;  // stream, BLAS handle, arena, transfer counters
  const ExecContext& ctx_;                 // device_->exec()
  StatePool pool_;
  SessionStore sessions_;
  PrefixCache prefix_;
  std::map<RequestId, std::unique_ptr<Seq>> seqs_;
  int state_copy_slots_ = 0;      // slots holding StateCopy copies
  StateCopyCounts state_copies_;  // totals
  std::vector<RequestId> running_;
  std::deque<RequestId> waiting_;
  Tensor logits_;                   // [rows, vocab] on the device, grown as needed
  std::vector<float> host_logits_;  // [rows, vocab]: the rows that came back whole
  // Pre-sampling: K (0: off) and, per row, K ids, K logits, the argmax and the log-sum-exp
  // (4-byte words, [rows, 2K + 2]; with draws also their weight sums, tokens and logits), as one
  // download; the draws' inputs go up as one upload from host_draw_in_.
  int presample_k_ = 0;
  OpTimer* op_timer_open_ = nullptr;   // the timer whose window is open (engine thread)
  std::set<size_t> op_timer_batches_;  // batch sizes whose decode steps ran (engine thread)
  std::vector<uint32_t> host_top_;
  bool host_top_draws_ = false;  // whether host_top_ holds draws
  std::vector<uint32_t> host_draw_in_;
  // CUDA graphs of decode steps (null: eager), and the pool slot its padding rows use (−1: none).
  std::unique_ptr<DecodeGraphs> graphs_;
  int pad_slot_ = -1;
  uint64_t step_ = 0;
  // Time the pool's reclaimer spent moving device-tier states to host RAM since the last step
  // took it (counted as prefix-snapshot time).
  double reclaim_seconds_ = 0;
  absl::Time last_housekeeping_ = absl::InfinitePast();

  // Hand-over state, guarded by mu_.
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Seq>> incoming_ ABSL_GUARDED_BY(mu_);
  std::map<RequestId, bool> cancels_ ABSL_GUARDED_BY(mu_);  // id → deadline passed
  std::map<RequestId, bool> pauses_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int queued_ ABSL_GUARDED_BY(mu_) = 0;             // submitted, not yet admitted or finished
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;  // their prompt tokens
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;          // submitted, not yet finished
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);     // Abort's: ok until then
  bool abort_news_ ABSL_GUARDED_BY(mu_) = false;  // until a step has seen it
  bool loop_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status persisted_ ABSL_GUARDED_BY(mu_);  // PersistAll's at the loop's end
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::function<void(const StepRecord&)> observer_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> device_lost_observer_ ABSL_GUARDED_BY(mu_);
  absl::Status device_lost_;   // engine thread: not ok once the device is lost (LoseDeviceIf)
  absl::Mutex after_stop_mu_;  // serialises session requests once the engine thread is gone
  std::thread thread_;
};

}  // namespace linfer
