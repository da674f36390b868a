// Engine: creation, submission, the hand-over queues, engine-thread tasks (session requests),
// the loop and shutdown. The step itself is in engine_step.cc.
#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/seq.h"
#include "kernels/device_lost.h"
#include "kernels/presample.h"
#include "models/host_memory.h"

namespace linfer {

absl::string_view FinishName(Finish finish) {
  switch (finish) {
    case Finish::kNone:
      return "";
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kDeadline:
      return "deadline";
    case Finish::kError:
      return "error";
  }
  return "?";
}

absl::StatusOr<EngineOptions::Presampling> ParsePresampling(absl::string_view name) {
  if (name == "auto") return EngineOptions::Presampling::kAuto;
  if (name == "on") return EngineOptions::Presampling::kOn;
  if (name == "off") return EngineOptions::Presampling::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--presample must be auto, on or off, got '", name, "'"));
}

absl::StatusOr<DiskDirectories> LockDiskDirectories(const EngineOptions& options,
                                                    DiskDirectories held) {
  auto lock = [&](const std::string& dir, absl::string_view flag) -> absl::Status {
    RETURN_IF_ERROR(PrepareDirectory(dir, flag));
    std::error_code ec;
    std::filesystem::path canonical = std::filesystem::canonical(dir, ec);
    if (ec) canonical = dir;
    if (std::find(held.paths.begin(), held.paths.end(), canonical) != held.paths.end()) {
      return absl::OkStatus();  // both tiers in one directory, or locked by the caller
    }
    ASSIGN_OR_RETURN(DirectoryLock taken, DirectoryLock::Acquire(dir, flag));
    held.locks.push_back(std::move(taken));
    held.paths.push_back(std::move(canonical));
    return absl::OkStatus();
  };
  if (!options.tiers.disk_dir.empty()) {
    RETURN_IF_ERROR(lock(options.tiers.disk_dir, "--session_disk_dir"));
  }
  if (!options.prefix_cache.disk_dir.empty() && options.prefix_cache.disk_budget_bytes > 0 &&
      options.prefix_cache.budget_bytes > 0) {
    RETURN_IF_ERROR(lock(options.prefix_cache.disk_dir, "--prefix_cache_disk_dir"));
  }
  return held;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       EngineOptions options,
                                                       DiskDirectories held) {
  if (model == nullptr) return absl::InvalidArgumentError("engine needs a model");
  if (options.chunk_size < 1 || options.scheduler.max_step_tokens < 1 ||
      options.scheduler.max_running < 1 || options.max_new_tokens < 1 ||
      options.max_model_len < 0 || options.kv_block_tokens < 1 ||
      options.prefix_cache.budget_bytes < 0 || options.prefix_cache.snapshot_interval < 0) {
    return absl::InvalidArgumentError(
        "chunk_size, max_step_tokens, max_running, max_new_tokens and kv_block_tokens must be "
        "positive; max_model_len and the prefix cache's budget and interval not negative");
  }
  // The disk directories, each locked for this engine's life (one server per directory).
  ASSIGN_OR_RETURN(DiskDirectories disk, LockDiskDirectories(options, std::move(held)));
  if (options.op_timer != nullptr && (model->device() != Device::kCuda || options.cuda_graphs)) {
    return absl::InvalidArgumentError(
        "op_timer needs a CUDA model with cuda_graphs off (a graph's kernels cannot be timed one "
        "by one; on the CPU there is nothing to time)");
  }
  if (options.prefill_op_timer != nullptr && model->device() != Device::kCuda) {
    return absl::InvalidArgumentError(
        "prefill_op_timer needs a CUDA model (on the CPU there is nothing to time)");
  }
  // States parked in host memory are pinned on CUDA (the copy doors then run at PCIe speed).
  if (model->device() == Device::kCuda) UsePinnedHostStates(Device::kCuda);
  // The engine's stream and BLAS handle on the model's device (made current on this thread).
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> device,
                   DeviceContext::Create(
                       {.device = model->device(), .batch_invariant = options.batch_invariant}));
  int slots = StatePool::SlotsForBudget(options.state_memory_bytes, model->state_bytes());
  if (options.max_slots > 0) slots = std::min(slots, options.max_slots);
  ASSIGN_OR_RETURN(
      StatePool pool,
      StatePool::Create(*model, slots, {options.kv_memory_bytes, options.kv_block_tokens}));
  Log(LogLevel::kInfo,
      absl::StrCat("state: ", model->state_bytes(), " bytes per sequence; ", slots, " slots (",
                   model->state_bytes() * slots, " bytes) on ", DeviceName(model->device())));
  // CUDA graphs keep one slot (and its KV block) for padding rows: the engine offers the others.
  const bool graphs = model->device() == Device::kCuda && options.cuda_graphs && slots >= 2;
  if (model->device() == Device::kCuda && options.cuda_graphs && !graphs) {
    Log(LogLevel::kInfo, "CUDA graphs off: one slot only (the graphs need a padding slot)");
  }
  if (model->device() == Device::kCuda && options.batch_invariant) {
    Log(LogLevel::kWarning,
        "batch_invariant has no effect on CUDA (CPU only): cuBLASLt picks its kernels by batch "
        "size, so a row's logits may differ with what else shares its step");
  }
  const int64_t positions = model->config().max_position_embeddings > 0
                                ? model->config().max_position_embeddings
                                : int64_t{1} << 20;
  if (pool.has_kv()) {
    const int64_t capacity = (pool.kv_total_blocks() - (graphs ? 1 : 0)) * pool.kv_block_tokens();
    Log(LogLevel::kInfo,
        absl::StrCat("KV cache: ", pool.kv_bytes_per_token(), " bytes per token; ",
                     pool.kv_total_blocks(), " blocks of ", pool.kv_block_tokens(), " tokens (",
                     capacity, " tokens, ",
                     pool.kv_total_blocks() * pool.kv_block_tokens() * pool.kv_bytes_per_token(),
                     " bytes)"));
    if (options.max_model_len > capacity) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_model_len ", options.max_model_len, " needs ",
                       options.max_model_len * pool.kv_bytes_per_token(),
                       " bytes of KV for one sequence; the KV cache holds ", capacity,
                       " tokens: raise --kv_memory_mb or lower --max_model_len"));
    }
    if (options.max_model_len == 0) {
      options.max_model_len = std::min(positions, capacity);
      if (capacity < positions) {
        Log(LogLevel::kInfo,
            absl::StrCat("max_model_len ", capacity, " (what the KV cache holds; ",
                         "the model allows ", positions, ": raise --kv_memory_mb for more)"));
      }
    }
  } else if (options.max_model_len == 0) {
    options.max_model_len = positions;
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(model), std::move(options),
                                            slots - (graphs ? 1 : 0), std::move(device),
                                            std::move(pool), std::move(disk.locks)));
  RETURN_IF_ERROR(engine->WarmUp());
  engine->Start(graphs);
  return engine;
}

absl::Status Engine::WarmUp() {
  if (!options_.warm_up.value_or(model_->device() == Device::kCuda)) return absl::OkStatus();
  // The step's whole budget as the scheduler would fill it: prompts of at most max_model_len
  // tokens each, in as many slots (and at most max_running), no more tokens than the KV holds.
  int64_t budget = options_.scheduler.max_step_tokens;
  if (pool_.has_kv()) budget = std::min(budget, pool_.kv_total_blocks() * pool_.kv_block_tokens());
  const int64_t per_prompt = std::min(budget, options_.max_model_len);
  if (per_prompt < 1) return absl::OkStatus();
  std::vector<int> slots;
  std::vector<Segment> segments;
  int64_t tokens = 0;
  absl::Status st;
  while (tokens < budget && static_cast<int>(slots.size()) < options_.scheduler.max_running &&
         pool_.free_slots() > 0) {
    absl::StatusOr<int> slot = pool_.Allocate(ctx_);
    st = slot.status();
    if (!st.ok() || *slot < 0) break;
    slots.push_back(*slot);
    const int64_t n = std::min(per_prompt, budget - tokens);
    if (pool_.has_kv()) st = pool_.ReserveKv(ctx_, *slot, n, 0);
    if (!st.ok()) break;
    segments.push_back({tokens, n, 0, *slot});
    tokens += n;
  }
  const absl::Time t0 = absl::Now();
  if (st.ok() && tokens > 0) {
    const std::vector<int32_t> ids(static_cast<size_t>(tokens), 0);
    absl::StatusOr<Tensor> logits =
        Tensor::Empty(DType::kF32, {static_cast<int64_t>(segments.size()), model_->vocab_size()},
                      model_->device());
    st = logits.status();
    if (st.ok()) {
      const ForwardOptions forward{RecurrenceMode::kAuto, options_.chunk_size, false};
      st = model_->Forward(ctx_, StepInput{ids, segments}, pool_.states(), logits->view(), forward);
    }
    if (st.ok() && options_.forward_fault) st = options_.forward_fault(0);
    const absl::Status synced = Synchronize(ctx_);
    if (st.ok()) st = synced;
  }
  // One block of the step's peak and some room (a step of the same tokens in more segments
  // holds a little more: segment and KV block tables, the draws' inputs), so steps after it
  // allocate nothing.
  const int64_t scratch = device_->arena().peak_bytes();
  const int64_t room = std::max(int64_t{1} << 20, scratch / 8);
  device_->arena().Reset();
  if (st.ok()) st = device_->arena().Reserve(scratch + room);
  for (int slot : slots) pool_.Free(slot);  // zeroed when next allocated; their KV blocks go back
  device_->transfers().Reset();
  if (!st.ok()) {
    absl::Status out(
        st.code(),
        absl::StrCat(
            "the warm-up step of ", tokens, " tokens (the step's token budget, ",
            "--max_step_tokens, in prompts of at most --max_model_len) failed: ", st.message(),
            absl::IsResourceExhausted(st)
                ? ". Lower --max_step_tokens, or the pools' budgets (--state_memory_mb, "
                  "--kv_memory_mb), to leave the step's activations room"
                : ""));
    st.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
      out.SetPayload(url, payload);  // a lost device stays one
    });
    return out;
  }
  auto mib = [](int64_t bytes) {
    return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB")
                              : absl::StrCat(bytes >> 10, " KiB");
  };
  Log(LogLevel::kInfo,
      absl::StrCat("warm-up step: ", tokens, " tokens in ", segments.size(), " prompts, ",
                   absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Milliseconds(1))),
                   "; the step's scratch: ", mib(scratch), " (", mib(scratch + room), " kept)"));
  return absl::OkStatus();
}

void Engine::Start(bool graphs) {
  if (graphs) StartGraphs();
  thread_ = std::thread([this] { Loop(); });
}

Engine::Engine(std::unique_ptr<Model> model, EngineOptions options, int slots,
               std::unique_ptr<DeviceContext> device, StatePool pool,
               std::vector<DirectoryLock> locks)
    : locks_(std::move(locks)),
      model_(std::move(model)),
      options_(std::move(options)),
      num_slots_(slots),
      device_(std::move(device)),
      ctx_(device_->exec()),
      pool_(std::move(pool)),
      sessions_(&pool_, &ctx_,
                BlobModel{model_->fingerprint(), &model_->state_specs(), model_->vocab_size(),
                          options_.max_model_len},
                options_.tiers),
      prefix_(options_.prefix_cache) {
  stats_.slots_total = slots;
  stats_.state_bytes_per_sequence = model_->state_bytes();
  stats_.kv_blocks_total = pool_.kv_total_blocks();
  stats_.kv_bytes_per_block = pool_.kv_bytes_per_token() * pool_.kv_block_tokens();
  stats_.sessions = sessions_.counts();
  const bool presample = options_.presample == EngineOptions::Presampling::kOn ||
                         (options_.presample == EngineOptions::Presampling::kAuto &&
                          model_->device() == Device::kCuda);
  if (presample) {
    presample_k_ = MaxPresampleK(model_->device(), model_->vocab_size());
    if (presample_k_ < kMaxPresampleK && presample_k_ < model_->vocab_size()) {
      Log(LogLevel::kWarning,
          presample_k_ == 0
              ? absl::StrCat("pre-sampling off: the ", DeviceName(model_->device()),
                             " pre-sampler takes no vocabulary of ", model_->vocab_size())
              : absl::StrCat("pre-sampling with the ", presample_k_, " best logits per row (not ",
                             kMaxPresampleK, "): the vocabulary of ", model_->vocab_size(),
                             " allows no more on ", DeviceName(model_->device())));
    }
  }
  if (prefix_.enabled() && options_.prefix_cache.device_tier) {
    // The prefix cache's device tier: saved states stay in free slots; the pool takes the least
    // recently used one back whenever it has no free slot left.
    prefix_.SetSlotTier({[this](int slot) -> absl::StatusOr<HostState> {
                           HostState state;
                           RETURN_IF_ERROR(pool_.Snapshot(ctx_, slot, &state));
                           return state;
                         },
                         [this](int slot) { pool_.Free(slot); }, model_->state_bytes()});
  }
  // With no slot free, the pool takes back a slot holding a state copy of a session turn (it moves
  // to host memory), then the prefix cache's least recently used one.
  pool_.SetReclaimer(
      [this] {
        const absl::Time t0 = absl::Now();
        const bool freed =
            ParkAStateCopy() || (prefix_.device_tier() && prefix_.ReleaseOldestSlot());
        reclaim_seconds_ += absl::ToDoubleSeconds(absl::Now() - t0);
        return freed;
      },
      [this] { return state_copy_slots_ + static_cast<int>(prefix_.device_entries()); });
}

void Engine::StartGraphs() {
  absl::StatusOr<int> pad = pool_.Allocate(ctx_);
  absl::Status st = !pad.ok()  ? pad.status()
                    : *pad < 0 ? absl::InternalError("no slot for padding rows")
                               : absl::OkStatus();
  if (st.ok()) {
    pad_slot_ = *pad;
    if (pool_.has_kv()) st = pool_.ReserveKv(ctx_, pad_slot_, 1, 0);  // position 0's block
    absl::MutexLock lock(&mu_);
    stats_.kv_blocks_total -= pool_.kv_held_blocks(pad_slot_);
  }
  if (st.ok()) {
    const int max_batch = std::min(options_.scheduler.max_running, num_slots_);
    absl::StatusOr<std::unique_ptr<DecodeGraphs>> g =
        DecodeGraphs::Create(model_.get(), device_.get(), &pool_.states(), pad_slot_, max_batch);
    st = g.status();
    if (g.ok()) graphs_ = *std::move(g);
  }
  Log(st.ok() ? LogLevel::kInfo : LogLevel::kWarning,
      st.ok() ? absl::StrCat("CUDA graphs for decode steps of up to ", graphs_->max_batch(),
                             " sequences (slot ", pad_slot_, " holds the padding rows)")
              : absl::StrCat("CUDA graphs off: ", st.ToString()));
}

Engine::~Engine() { Stop(); }

absl::Status CheckPriority(const EngineOptions& options, int priority) {
  if (priority == 0 || options.priority_scheduling) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "priority ", priority,
      " needs priority scheduling, which this server has off (--scheduling_policy priority)"));
}

absl::Status ContextLengthError(int64_t max_model_len, int64_t history, int64_t prompt,
                                int64_t max_tokens) {
  return absl::InvalidArgumentError(absl::StrCat(
      "This model's maximum context length is ", max_model_len,
      " tokens (max_model_len). However, you requested ", history + prompt + max_tokens,
      " tokens (", history > 0 ? absl::StrCat(history, " held by the session, ") : "", prompt,
      " in the prompt, ", max_tokens, " for max_tokens)"));
}

absl::StatusOr<RequestId> Engine::Submit(GenerateRequest request, EventSink sink) {
  const int64_t vocab = model_->vocab_size();
  if (!sink) return absl::InvalidArgumentError("a request needs an event sink");
  RETURN_IF_ERROR(ValidateTokenIds(request.prompt, vocab, "prompt"));
  RETURN_IF_ERROR(ValidateTokenIds(request.penalty_context, vocab, "penalty_context"));
  if (static_cast<int64_t>(request.penalty_context.size()) > options_.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("penalty_context: ", request.penalty_context.size(),
                     " tokens, more than max_model_len ", options_.max_model_len));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(request.sampling, vocab));
  if (!request.stop.eos_token_id) request.stop.eos_token_id = model_->config().eos_token_id;
  RETURN_IF_ERROR(ValidateStopParams(request.stop, vocab));
  if (!request.stop.stop_strings.empty() && !options_.detokenizer) {
    return absl::InvalidArgumentError("stop strings need a tokenizer, and this model has none");
  }
  if (request.stop.max_tokens > options_.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", request.stop.max_tokens,
                                                   " exceeds this server's limit of ",
                                                   options_.max_new_tokens));
  }
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  if (len + request.stop.max_tokens > options_.max_model_len) {
    return ContextLengthError(options_.max_model_len, 0, len, request.stop.max_tokens);
  }
  if (len > options_.max_waiting_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", len,
                                                   " tokens) is longer than this server ever "
                                                   "queues (--max_waiting_tokens ",
                                                   options_.max_waiting_tokens, ")"));
  }
  RETURN_IF_ERROR(CheckPriority(options_, request.priority));
  if (!request.session_id.empty()) RETURN_IF_ERROR(SessionStore::ValidateId(request.session_id));
  if (request.session_id.empty() && request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  if (request.prefill_only && request.session_id.empty()) {
    return absl::InvalidArgumentError("a prefill-only request needs a session to keep its state");
  }
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_salt: at most ", kMaxCacheSaltBytes,
                                                   " bytes, got ", request.cache_salt.size()));
  }
  if (request.prompt_logprobs) {
    if (*request.prompt_logprobs < 0 || *request.prompt_logprobs > kMaxLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_logprobs must be in [0, ", kMaxLogprobs, "], got ", *request.prompt_logprobs));
    }
    if (!request.session_id.empty()) {
      return absl::InvalidArgumentError(
          "prompt_logprobs: not with a session (its first token's logits belong to the history)");
    }
  }
  auto seq = std::make_unique<Seq>();
  seq->sink = std::move(sink);
  seq->owner_tag = OwnerTag(request.owner);
  // A salted tag cannot equal an unsalted one (tags are 16 hex digits) nor another salt's.
  seq->prefix_tag = request.cache_salt.empty()
                        ? seq->owner_tag
                        : absl::StrCat(seq->owner_tag, ":", request.cache_salt);
  seq->sampler.emplace(request.sampling);
  if (request.stop.min_tokens > 0) {
    // No stop token is sampled within min_tokens. EOS too under ignore_eos, as vLLM (its
    // min_tokens processor bans all_stop_token_ids, which hold the model's EOS). Under structured
    // output SampleConstrained also keeps the stop tokens out of the grammar's mask there (and
    // ends a complete output that cannot go on); a constraint that is Free() at times (a thinking
    // budget) leaves those positions to this ban.
    std::vector<int32_t> ends = request.stop.stop_token_ids;
    if (request.stop.eos_token_id) ends.push_back(*request.stop.eos_token_id);
    seq->sampler->Ban(ends);
  }
  if (!request.penalty_context.empty() && request.sampling.repetition_penalty != 1.0f) {
    seq->penalty_prompt = std::move(request.penalty_context);
    seq->penalty_prompt.insert(seq->penalty_prompt.end(), request.prompt.begin(),
                               request.prompt.end());
  }
  request.penalty_context = {};
  seq->stop.emplace(request.stop);
  // A session's text continues its history: its detokenizer is made once the session is
  // resolved (ResolveSession).
  if (options_.detokenizer && request.session_id.empty()) {
    seq->detok = options_.detokenizer(request.prompt);
  }
  seq->submitted = absl::Now();
  seq->req = std::move(request);
  absl::MutexLock lock(&mu_);
  if (!accepting_) {
    return aborted_.ok() ? absl::UnavailableError("the engine is shutting down") : aborted_;
  }
  if (queued_ >= options_.max_waiting || queued_tokens_ + len > options_.max_waiting_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", queued_,
                                                     " requests, ", queued_tokens_,
                                                     " prompt tokens waiting); retry later"));
  }
  seq->id = next_id_++;
  seq->arrival = seq->id;
  ++queued_;
  ++in_flight_;
  queued_tokens_ += len;
  const RequestId id = seq->id;
  incoming_.push_back(std::move(seq));
  return id;
}

void Engine::Cancel(RequestId id, bool deadline_passed) {
  absl::MutexLock lock(&mu_);
  cancels_[id] = cancels_[id] || deadline_passed;
}

void Engine::SetPaused(RequestId id, bool paused) {
  absl::MutexLock lock(&mu_);
  pauses_[id] = paused;
}

absl::Status Engine::RunOnEngine(std::function<void()> task) {
  absl::Notification done;
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    if (!loop_done_) {
      tasks_.push_back([&] {
        task();
        RefreshGauges();
        done.Notify();
      });
      queued = true;
    }
  }
  if (queued) {
    done.WaitForNotification();
    return absl::OkStatus();
  }
  // The engine thread has exited: nothing else touches the pool or the sessions.
  absl::MutexLock lock(&after_stop_mu_);
  RETURN_IF_ERROR(device_->MakeCurrent());
  task();
  RefreshGauges();
  return absl::OkStatus();
}

void Engine::RefreshGauges() {
  const int slots_used = SlotsInUse();
  const int64_t kv_used = KvBlocksInUse();
  const TierCounts sessions = sessions_.counts();
  const int64_t evicted = sessions_.evicted();
  const PrefixCacheStats prefix = prefix_.stats();
  absl::MutexLock lock(&mu_);
  stats_.prefix_cache = prefix;
  stats_.slots_used = slots_used;
  stats_.kv_blocks_used = kv_used;
  stats_.sessions = sessions;
  stats_.sessions_evicted_total = evicted;
}

namespace {

// The new session's description, in the engine task that made it (`info` may be null).
absl::Status Describe(SessionStore& sessions, const absl::StatusOr<std::string>& made,
                      const std::string& owner_tag, SessionInfo* info) {
  if (info == nullptr || !made.ok()) return absl::OkStatus();
  ASSIGN_OR_RETURN(*info, sessions.Get(*made, owner_tag));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> Engine::CreateSession(const std::string& id, const std::string& owner,
                                                  SessionInfo* info) {
  absl::StatusOr<std::string> out = absl::InternalError("not run");
  absl::Status described;
  RETURN_IF_ERROR(RunOnEngine([&] {
    out = sessions_.Create(id, OwnerTag(owner));
    described = Describe(sessions_, out, OwnerTag(owner), info);
  }));
  RETURN_IF_ERROR(described);
  return out;
}

absl::StatusOr<std::string> Engine::CreateInternalSession(const std::string& owner) {
  absl::StatusOr<std::string> out = absl::InternalError("not run");
  RETURN_IF_ERROR(RunOnEngine([&] { out = sessions_.Create("", OwnerTag(owner), true); }));
  return out;
}

absl::StatusOr<SessionInfo> Engine::GetSession(const std::string& id, const std::string& owner) {
  absl::StatusOr<SessionInfo> out = absl::InternalError("not run");
  RETURN_IF_ERROR(RunOnEngine([&] { out = sessions_.Get(id, OwnerTag(owner)); }));
  return out;
}

absl::StatusOr<SessionInfo> Engine::SessionForTurn(const std::string& id,
                                                   const std::string& owner) {
  absl::StatusOr<SessionInfo> out = absl::InternalError("not run");
  RETURN_IF_ERROR(RunOnEngine([&] {
    out = sessions_.Get(id, OwnerTag(owner));
    if (out.ok() && out->busy) {  // its position changes when that request ends
      out = absl::FailedPreconditionError(
          absl::StrCat("session '", id, "' is busy with another request"));
    } else if (out.ok()) {
      if (absl::Status quota = sessions_.CheckGrownQuota(id, OwnerTag(owner)); !quota.ok()) {
        out = quota;
      }
    }
  }));
  return out;
}

absl::StatusOr<std::vector<SessionInfo>> Engine::ListSessions(const std::string& owner) {
  std::vector<SessionInfo> out;
  RETURN_IF_ERROR(RunOnEngine([&] { out = sessions_.List(OwnerTag(owner)); }));
  return out;
}

absl::StatusOr<std::string> Engine::ForkInternalSession(const std::string& src,
                                                        const std::string& owner) {
  absl::StatusOr<std::string> out = absl::InternalError("not run");
  RETURN_IF_ERROR(RunOnEngine([&] {
    out = sessions_.Fork(src, "", OwnerTag(owner), /*internal=*/true);
    if (!out.ok()) out = LoseDeviceIf(out.status());
  }));
  return out;
}

absl::StatusOr<std::string> Engine::ForkSession(const std::string& src, const std::string& dst,
                                                const std::string& owner, SessionInfo* info) {
  absl::StatusOr<std::string> out = absl::InternalError("not run");
  absl::Status described;
  RETURN_IF_ERROR(RunOnEngine([&] {
    out = sessions_.Fork(src, dst, OwnerTag(owner));
    if (!out.ok()) out = LoseDeviceIf(out.status());  // a device copy may be where it shows
    described = Describe(sessions_, out, OwnerTag(owner), info);
  }));
  RETURN_IF_ERROR(described);
  return out;
}

absl::Status Engine::DeleteSession(const std::string& id, const std::string& owner) {
  absl::Status out;
  RETURN_IF_ERROR(RunOnEngine([&] { out = sessions_.Delete(id, OwnerTag(owner)); }));
  return out;
}

absl::Status Engine::ResetPrefixCache() {
  return RunOnEngine([&] { prefix_.Clear(); });
}

absl::StatusOr<std::string> Engine::ExportSession(const std::string& id, const std::string& owner) {
  absl::StatusOr<SessionStore::ExportSource> src = absl::InternalError("not run");
  RETURN_IF_ERROR(RunOnEngine([&] {
    src = sessions_.ExportSnapshot(id, OwnerTag(owner));
    if (!src.ok()) src = LoseDeviceIf(src.status());
  }));
  if (!src.ok()) return src.status();
  // Here, not on the engine thread: a disk-tier file's read and checks, and the encoding.
  if (src->disk_fd >= 0) {
    absl::StatusOr<StateSnapshot> d =
        ReadDiskState(src->disk_fd, src->disk_path, sessions_.blob_model(), src->disk_expected);
    ::close(src->disk_fd);
    if (!d.ok()) return SessionFileError(id, d.status());
    src->snapshot = *std::move(d);
  }
  return EncodeStateBlob(sessions_.blob_model(), src->snapshot);
}

absl::StatusOr<std::string> Engine::ImportSession(const std::string& id, const std::string& owner,
                                                  absl::string_view blob, SessionInfo* info) {
  // Decoded and checked here (CRC, sizes, finite values), not on the engine thread.
  ASSIGN_OR_RETURN(StateSnapshot snap, DecodeStateBlob(blob, sessions_.blob_model()));
  absl::StatusOr<std::string> out = absl::InternalError("not run");
  absl::Status described;
  RETURN_IF_ERROR(RunOnEngine([&] {
    out = sessions_.ImportSnapshot(id, OwnerTag(owner), std::move(snap));
    described = Describe(sessions_, out, OwnerTag(owner), info);
  }));
  RETURN_IF_ERROR(described);
  return out;
}

EngineStats Engine::Stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Engine::SetStepObserver(std::function<void(const StepRecord&)> observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

bool Engine::idle() {
  absl::MutexLock lock(&mu_);
  return in_flight_ == 0;
}

void Engine::Loop() {
  if (absl::Status st = device_->MakeCurrent(); !st.ok()) {
    Log(LogLevel::kError, absl::StrCat("engine thread: ", st.ToString()));
  }
  bool progressed = true;
  for (;;) {
    std::deque<std::function<void()>> tasks;
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !incoming_.empty() || !tasks_.empty() || !cancels_.empty() || !pauses_.empty() ||
               stopping_ || abort_news_;
      };
      // With work that could not move in the last step (every request waiting for a slot, or
      // paused), wait for news a little rather than spin a core on empty steps; deadlines and
      // the housekeeping still get their steps.
      if (!HasLocalWork()) {
        mu_.AwaitWithTimeout(absl::Condition(&ready), options_.housekeeping);
      } else if (!progressed) {
        mu_.AwaitWithTimeout(absl::Condition(&ready),
                             std::min(options_.housekeeping, absl::Milliseconds(5)));
      }
      tasks.swap(tasks_);
      stop = stopping_ && incoming_.empty() && !HasLocalWork();
    }
    for (auto& task : tasks) task();
    const absl::Time now = absl::Now();
    if (now - last_housekeeping_ >= options_.housekeeping) {
      last_housekeeping_ = now;
      sessions_.ExpireIdle(now);
    }
    if (stop) break;
    progressed = Step();
  }
  // With the device lost, what its slots held cannot be read back: the other tiers' sessions only.
  absl::Status persisted = sessions_.PersistAll();
  if (!persisted.ok()) {
    Log(LogLevel::kError, absl::StrCat("persisting sessions: ", persisted.ToString()));
  }
  RefreshGauges();
  std::deque<std::function<void()>> late;
  {
    absl::MutexLock lock(&mu_);
    loop_done_ = true;
    persisted_ = std::move(persisted);
    late.swap(tasks_);
  }
  for (auto& task : late) task();
}

void Engine::Abort(absl::Status why) {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
  aborted_ = std::move(why);
  abort_news_ = true;
}

void Engine::SetDeviceLostObserver(std::function<void(const absl::Status&)> observer) {
  absl::MutexLock lock(&mu_);
  device_lost_observer_ = std::move(observer);
}

absl::Status Engine::LoseDeviceIf(const absl::Status& error) {
  if (!IsDeviceLost(error)) return error;
  if (!device_lost_.ok()) return device_lost_;
  // The device's error for the clients; where it showed (a call, a source line) for the log.
  const absl::Status why = absl::UnavailableError(absl::StrCat(
      "the server's ", DeviceName(ctx_.device), " device failed and cannot be used again by ",
      "this process (", DeviceLostCause(error), "); the server is restarting: retry the request ",
      "(a session whose state was in the device's memory is lost)"));
  device_lost_ = why;
  sessions_.LoseDevice(why);
  Log(LogLevel::kError, absl::StrCat(why.message(), ": ", error.message()));
  Abort(why);  // every other request ends at the next step; new ones are refused with it
  std::function<void(const absl::Status&)> observer;
  {
    absl::MutexLock lock(&mu_);
    observer = device_lost_observer_;
  }
  if (observer) observer(why);
  return why;
}

absl::Status Engine::persist_status() {
  absl::MutexLock lock(&mu_);
  return persisted_;
}

void Engine::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&drained), grace);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace linfer
