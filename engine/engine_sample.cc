// The step's forward pass (packed tokens in, logits out), sampling, stop checks, and finishing a
// request (events, usage, releasing or rolling back its state). Engine thread, no lock.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/seq.h"
#include "kernels/device_lost.h"
#include "kernels/presample.h"
#include "kernels/transfer.h"

namespace linfer {
namespace {

// The pre-sampled block of a step, in 4-byte words: with draws, every row's weight sum (F64, first
// for alignment); every row's K ids, then every row's K logits, the rows' argmax, the rows'
// log-sum-exp; with draws, the drawn tokens and their logits (one kernel launch writes it, one
// download brings it back).
struct TopLayout {
  int64_t rows, k;
  bool draws;
  int64_t weight_sums() const { return 0; }
  int64_t ids() const { return draws ? 2 * rows : 0; }
  int64_t logits() const { return ids() + rows * k; }
  int64_t argmax() const { return ids() + 2 * rows * k; }
  int64_t logsumexp() const { return argmax() + rows; }
  int64_t drawn() const { return logsumexp() + rows; }
  int64_t drawn_logits() const { return drawn() + rows; }
  int64_t words() const { return draws ? drawn_logits() + rows : logsumexp() + rows; }
};

// The draws' inputs, in 4-byte words: every row's uniform bits (I64), then every row's
// 1/temperature.
struct DrawInLayout {
  int64_t rows;
  int64_t bits() const { return 0; }
  int64_t inv_temperature() const { return 2 * rows; }
  int64_t words() const { return 3 * rows; }
};

// The tokens that end an output: stop_token_ids, and EOS unless ignore_eos.
std::vector<int32_t> StopTokens(const StopParams& stop) {
  std::vector<int32_t> stops = stop.stop_token_ids;
  if (!stop.ignore_eos && stop.eos_token_id) stops.push_back(*stop.eos_token_id);
  return stops;
}

// Whether `token` is one of StopTokens(stop) (without making the list: once per sampled token).
bool IsStopToken(const StopParams& stop, int32_t token) {
  if (!stop.ignore_eos && stop.eos_token_id == token) return true;
  return std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) !=
         stop.stop_token_ids.end();
}

}  // namespace

void Engine::OpenOpTimer(const std::vector<ScheduledSeq>& plan) {
  bool decode_only = true;
  for (const ScheduledSeq& p : plan) decode_only &= p.tokens == 1;
  OpTimer* timer = decode_only ? options_.op_timer : options_.prefill_op_timer;
  if (timer == nullptr) return;
  // The first decode step of a batch size is not timed: its first launches may load modules
  // (CUDA's lazy loading, cuBLASLt's kernels for a new shape), which can synchronize behind the
  // gate. A prompt step's window has no gate.
  if (decode_only && op_timer_batches_.insert(plan.size()).second) return;
  const OpTimer::Gate gate = decode_only ? OpTimer::Gate::kHold : OpTimer::Gate::kNone;
  if (absl::Status st = timer->Open(ctx_, gate); !st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("op timing: ", st.ToString()));
    return;
  }
  op_timer_open_ = timer;
}

void Engine::CloseOpTimer() {
  if (op_timer_open_ == nullptr) return;
  OpTimer* timer = std::exchange(op_timer_open_, nullptr);
  if (absl::Status st = timer->Close(); !st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("op timing: ", st.ToString()));
  }
}

void Engine::Forward(const std::vector<ScheduledSeq>& plan, StepOutput& out) {
  std::vector<int32_t> tokens;
  std::vector<Segment> segments;
  std::vector<Seq*> seqs;
  for (const ScheduledSeq& p : plan) {
    Seq& s = *seqs_.at(p.id);
    segments.push_back(
        {static_cast<int64_t>(tokens.size()), p.tokens, pool_.position(s.slot), s.slot});
    tokens.insert(tokens.end(), s.tokens.begin() + s.computed,
                  s.tokens.begin() + s.computed + p.tokens);
    seqs.push_back(&s);
  }
  const int64_t rows = static_cast<int64_t>(plan.size()), vocab = model_->vocab_size();
  // Prompt logprobs: the segment's other rows' logits too, after every segment's own (logits rows
  // `rows` on; extra_at[i]: segment i's first), as whole rows.
  std::vector<int64_t> extra_at(static_cast<size_t>(rows), -1);
  int64_t logit_count = rows;
  for (int64_t i = 0; i < rows; ++i) {
    if (!seqs[i]->req.prompt_logprobs || plan[i].tokens < 2) continue;
    extra_at[i] = logit_count;
    logit_count += plan[i].tokens - 1;
  }
  const bool extra_rows = logit_count > rows;
  std::vector<int32_t> logit_rows;  // only with extra rows: the model's default is the last ones
  if (extra_rows) {
    for (const Segment& seg : segments) {
      logit_rows.push_back(static_cast<int32_t>(seg.row_begin + seg.num_tokens - 1));
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; extra_at[i] >= 0 && j + 1 < plan[i].tokens; ++j) {
        logit_rows.push_back(static_cast<int32_t>(segments[i].row_begin + j));
      }
    }
  }
  std::vector<RowNeed> need(static_cast<size_t>(logit_count), RowNeed::kRow);
  std::fill(need.begin(), need.begin() + rows, RowNeed::kNothing);
  std::vector<DrawIn> draw_in(static_cast<size_t>(logit_count));
  for (int64_t i = 0; i < rows; ++i) {
    Seq& s = *seqs[i];
    if (s.req.prompt_logprobs && s.computed + plan[i].tokens < s.prompt_end) {
      need[i] = RowNeed::kRow;  // its last row's logits give the next prompt token's logprob
      continue;
    }
    if (s.computed + plan[i].tokens < static_cast<int64_t>(s.tokens.size()) || s.req.prefill_only ||
        s.refeed) {
      continue;
    }
    if (presample_k_ == 0 || (s.req.constraint != nullptr && !s.req.constraint->Free()) ||
        !s.sampler->SamplesFromTop(presample_k_, vocab)) {
      need[i] = RowNeed::kRow;
    } else if (s.sampler->NeedsDeviceDraw()) {
      need[i] = RowNeed::kDraw;
      draw_in[i] = {1.0f / s.sampler->params().temperature, s.sampler->DrawAhead()};
    } else {
      need[i] = RowNeed::kTop;
    }
  }
  // The draws' inputs go up before the forward pass is queued (a copy from pageable memory may
  // wait for the stream): the pre-sampler's launches then follow the forward pass at once.
  absl::StatusOr<TensorView> draw_inputs = UploadDraws(need, draw_in);
  absl::Status st = draw_inputs.status();
  const ForwardOptions forward{RecurrenceMode::kAuto, options_.chunk_size, false};
  TensorView logits;
  // Why the CUDA graphs go after this step (empty: they stay): a failed capture (this step ran
  // eagerly, so will the next), a graph that could not be made (this step runs eagerly), or a
  // failed graph step.
  std::string drop_graphs;
  bool graphed = false;
  bool launched = false;  // the forward pass began: the states may have moved
  const absl::Time forward_start = absl::Now();
  if (st.ok() && !extra_rows && graphs_ != nullptr && graphs_->Accepts(segments)) {
    if (absl::Status prepared = graphs_->Prepare(segments); !prepared.ok()) {
      drop_graphs = prepared.ToString();
    } else {
      graphed = true;
      launched = true;
      absl::StatusOr<TensorView> l = graphs_->Run(tokens, segments, forward);
      st = l.status();
      if (l.ok()) logits = *l;
      if (!l.ok()) drop_graphs = l.status().ToString();
      if (!graphs_->capture_error().ok()) drop_graphs = graphs_->capture_error().ToString();
    }
  }
  if (st.ok() && !graphed) {
    if (logits_.rank() == 0 || logits_.dim(0) < logit_count) {
      absl::StatusOr<Tensor> t =
          Tensor::Empty(DType::kF32, {std::max<int64_t>(logit_count, 16), vocab}, model_->device());
      st = t.status();
      if (t.ok()) logits_ = *std::move(t);
    }
    if (st.ok()) {
      logits = logits_.view().Rows(0, logit_count);
      OpenOpTimer(plan);
      const StepInput in{tokens, segments, nullptr, extra_rows ? &logit_rows : nullptr};
      launched = true;
      st = model_->Forward(ctx_, in, pool_.states(), logits, forward);
    }
  }
  if (st.ok() && options_.forward_fault) st = options_.forward_fault(step_);
  // While the device computes (a CUDA step is queued): FetchRows' copies into pageable host
  // memory return only once they are done, so the masks come first.
  if (st.ok()) PrepareMasks(seqs, need);
  if (st.ok()) st = FetchRows(logits, need, *draw_inputs);
  if (st.ok()) st = Synchronize(ctx_);
  CloseOpTimer();
  out.forward_seconds += absl::ToDoubleSeconds(absl::Now() - forward_start);
  // The graphs go once this step is done with their logits buffer.
  absl::Cleanup drop = [this, &drop_graphs] {
    if (drop_graphs.empty()) return;
    Log(LogLevel::kWarning, absl::StrCat("CUDA graphs off: ", drop_graphs));
    graphs_.reset();  // its destructor waits for the stream
  };
  if (!st.ok()) {
    // No copy into host or staging memory may still be in flight; a sticky CUDA error that the
    // failed call did not report itself shows here.
    const absl::Status synced = Synchronize(ctx_);
    Log(LogLevel::kError, absl::StrCat("forward failed: ", st.ToString()));
    const absl::Status error = !IsDeviceLost(st) && IsDeviceLost(synced) ? synced : st;
    for (Seq* s : seqs) {
      s->forward_failed = launched;
      Finish(*s, Finish::kError, error, out);
    }
    return;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    if (s.req.prompt_logprobs) {
      CollectPromptLogprobs(s, plan[i].tokens, static_cast<int64_t>(i), extra_at[i]);
    }
    s.computed += plan[i].tokens;
    pool_.set_position(s.slot, pool_.position(s.slot) + plan[i].tokens);
    if (s.computed >= s.prompt_end) DropStateCopy(s.checkpoint);  // the prompt is in
    // Prefix cache: one-off sequences save their state every `snapshot_interval` prompt tokens,
    // at a branch point, and at the end of the prompt; a fresh session's first prompt at its
    // branch point only (its state stays the session's).
    const int64_t every = prefix_.options().snapshot_interval;
    const bool save = s.session == nullptr
                          ? s.computed == s.prompt_end || s.computed == s.branch_at ||
                                (every > 0 && s.computed / every > s.last_snapshot / every)
                          : s.computed == s.branch_at;
    if (prefix_.enabled() && save && s.computed <= s.prompt_end && s.computed > s.last_snapshot) {
      SavePrefix(s, out);
    }
    if (s.computed < static_cast<int64_t>(s.tokens.size())) continue;
    if (s.refeed) {
      EndRefeed(s, out);
      continue;
    }
    if (s.req.prefill_only) {
      Finish(s, Finish::kLength, absl::OkStatus(), out);
      continue;
    }
    absl::StatusOr<SampleResult> r = SampleRow(s, logits, static_cast<int64_t>(i), need[i]);
    if (!r.ok()) {
      Finish(s, Finish::kError, r.status(), out);
    } else if (r->token < 0) {  // a complete structured output with nothing to follow
      // What the stop checker held back (the start of a stop string, say within min_tokens) is
      // part of the document: nothing cut it.
      TokenEvent end;
      end.text = s.stop->Flush() + (s.detok ? s.detok->Flush() : std::string());
      Finish(s, Finish::kStop, absl::OkStatus(), out, std::move(end));
    } else if (absl::Status st = AdvanceFreeConstraint(s, r->token); !st.ok()) {
      Finish(s, Finish::kError, st, out);
    } else {
      Emit(s, *std::move(r), out);
    }
  }
}

void Engine::CollectPromptLogprobs(Seq& s, int64_t tokens, int64_t own, int64_t extra) {
  const int64_t vocab = model_->vocab_size();
  if (s.computed == 0 && s.prompt_lp.empty()) s.prompt_lp.push_back({s.tokens[0], {}, 0, {}});
  // Rows j predict prompt tokens computed + j + 1 (those before the prompt's end).
  const int64_t n = std::min(tokens, s.prompt_end - 1 - s.computed);
  if (n <= 0) return;
  const size_t first = s.prompt_lp.size();
  s.prompt_lp.resize(first + static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t j = 0; j < n; ++j) {
    const int64_t row = j + 1 == tokens ? own : extra + j;
    const absl::Span<const float> logits(host_logits_.data() + row * vocab,
                                         static_cast<size_t>(vocab));
    const int32_t target = s.tokens[s.computed + j + 1];
    SampleResult r = RawLogprobs(logits, target, *s.req.prompt_logprobs);
    const float at = logits[static_cast<size_t>(target)];
    const auto above =
        std::count_if(logits.begin(), logits.end(), [at](float v) { return v > at; });
    s.prompt_lp[first + static_cast<size_t>(j)] = {
        r.token, r.logprob, static_cast<int32_t>(above) + 1, std::move(r.top_logprobs)};
  }
}

void Engine::PrepareMasks(const std::vector<Seq*>& seqs, const std::vector<RowNeed>& need) {
  std::vector<Seq*> todo;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (need[i] != RowNeed::kNothing && seqs[i]->req.constraint != nullptr &&
        !seqs[i]->req.constraint->Free() && !seqs[i]->req.constraint->Forced()) {
      todo.push_back(seqs[i]);
    }
  }
  const size_t words = static_cast<size_t>((model_->vocab_size() + 63) / 64);
  const auto n = static_cast<int64_t>(todo.size());
  // Each constraint has its own scratch; the grammar and the token index are read-only.
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    Seq& s = *todo[static_cast<size_t>(i)];
    s.mask.assign(words, 0);
    s.req.constraint->FillAllowed(absl::MakeSpan(s.mask));
    s.mask_ready = true;
  }
}

absl::StatusOr<TensorView> Engine::UploadDraws(const std::vector<RowNeed>& need,
                                               const std::vector<DrawIn>& draw_in) {
  if (std::find(need.begin(), need.end(), RowNeed::kDraw) == need.end()) return TensorView();
  const DrawInLayout in{static_cast<int64_t>(need.size())};
  host_draw_in_.assign(static_cast<size_t>(in.words()), 0);
  for (size_t i = 0; i < need.size(); ++i) {
    if (need[i] != RowNeed::kDraw) continue;  // 1/temperature 0: no draw
    std::memcpy(&host_draw_in_[in.bits() + 2 * i], &draw_in[i].bits, sizeof(uint64_t));
    std::memcpy(&host_draw_in_[in.inv_temperature() + i], &draw_in[i].inv_temperature,
                sizeof(float));
  }
  ASSIGN_OR_RETURN(TensorView up, Scratch(ctx_, DType::kF32, {in.words()}));
  RETURN_IF_ERROR(Upload(ctx_, host_draw_in_.data(), up));
  return up;
}

absl::Status Engine::FetchRows(const TensorView& logits, const std::vector<RowNeed>& need,
                               const TensorView& draw_inputs) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const bool draws = draw_inputs.rank() != 0;  // some row draws
  host_top_draws_ = draws;
  if (draws || std::find(need.begin(), need.end(), RowNeed::kTop) != need.end()) {
    // Every row is pre-sampled; with draws, the drawing rows also draw (the others get none).
    const TopLayout at{rows, presample_k_, draws};
    ASSIGN_OR_RETURN(TensorView top, Scratch(ctx_, DType::kF32, {at.words()}));
    auto* base = top.data<uint32_t>();
    auto view = [&](int64_t word, DType dtype, Shape shape) {
      return TensorView(base + word, dtype, std::move(shape), ctx_.device);
    };
    const PresampleOutput o{
        view(at.ids(), DType::kI32, {rows, at.k}), view(at.logits(), DType::kF32, {rows, at.k}),
        view(at.argmax(), DType::kI32, {rows}), view(at.logsumexp(), DType::kF32, {rows})};
    PresampleDraws d;
    if (draws) {
      const DrawInLayout in{rows};
      auto* up_base = draw_inputs.data<uint32_t>();
      d = {TensorView(up_base + in.inv_temperature(), DType::kF32, {rows}, ctx_.device),
           TensorView(up_base + in.bits(), DType::kI64, {rows}, ctx_.device),
           view(at.weight_sums(), DType::kF64, {rows}), view(at.drawn(), DType::kI32, {rows}),
           view(at.drawn_logits(), DType::kF32, {rows})};
    }
    RETURN_IF_ERROR(Presample(ctx_, logits, o, draws ? &d : nullptr));
    host_top_.resize(static_cast<size_t>(at.words()));
    RETURN_IF_ERROR(Download(ctx_, top, host_top_.data()));
  }
  // Whole rows, a contiguous run at a time. The buffer grows only for them (a pre-sampled step
  // needs none: at 256 rows of a 248k vocabulary it would be 254 MB, zero-filled once).
  if (std::find(need.begin(), need.end(), RowNeed::kRow) != need.end()) {
    host_logits_.resize(std::max(host_logits_.size(), static_cast<size_t>(rows * vocab)));
  }
  for (int64_t i = 0; i < rows;) {
    if (need[i] != RowNeed::kRow) {
      ++i;
      continue;
    }
    int64_t end = i + 1;
    while (end < rows && need[end] == RowNeed::kRow) ++end;
    RETURN_IF_ERROR(Download(ctx_, logits.Rows(i, end - i), host_logits_.data() + i * vocab));
    i = end;
  }
  return absl::OkStatus();
}

absl::StatusOr<SampleResult> Engine::SampleRow(Seq& s, const TensorView& logits, int64_t row,
                                               RowNeed need) {
  const int64_t vocab = model_->vocab_size();
  if (need == RowNeed::kTop || need == RowNeed::kDraw) {
    const TopLayout at{logits.dim(0), presample_k_, host_top_draws_};
    const uint32_t* top = host_top_.data();
    const size_t k = static_cast<size_t>(at.k);
    PresampledRow pre{{reinterpret_cast<const int32_t*>(top + at.ids()) + row * at.k, k},
                      {reinterpret_cast<const float*>(top + at.logits()) + row * at.k, k},
                      reinterpret_cast<const float*>(top + at.logsumexp())[row],
                      vocab,
                      std::nullopt};
    if (need == RowNeed::kDraw) {
      PresampledRow::Draw d;
      std::memcpy(&d.weight_sum, top + at.weight_sums() + 2 * row, sizeof(double));
      d.token = reinterpret_cast<const int32_t*>(top + at.drawn())[row];
      d.logit = reinterpret_cast<const float*>(top + at.drawn_logits())[row];
      pre.draw = d;
    }
    ASSIGN_OR_RETURN(std::optional<SampleResult> r,
                     s.sampler->SampleTop(pre, s.PenaltyPrompt(), s.generated));
    if (r) return *std::move(r);
    // Min-p keeps tokens beyond the K, or top-p's mass lies beyond them: this row after all (rare;
    // the uniform drawn ahead, if any, is Sample's).
    const auto row_end = static_cast<size_t>((row + 1) * vocab);
    if (host_logits_.size() < row_end) host_logits_.resize(row_end);
    RETURN_IF_ERROR(Download(ctx_, logits.Rows(row, 1), host_logits_.data() + row * vocab));
    RETURN_IF_ERROR(Synchronize(ctx_));
  }
  const absl::Span<const float> full(host_logits_.data() + row * vocab, static_cast<size_t>(vocab));
  if (s.req.constraint != nullptr && !s.req.constraint->Free()) return SampleConstrained(s, full);
  return s.sampler->Sample(full, s.PenaltyPrompt(), s.generated);
}

// A Free() constraint's step past a token sampled without it (SampleConstrained advances it past
// the tokens it samples itself; a stop token moves no constraint).
absl::Status Engine::AdvanceFreeConstraint(Seq& s, int32_t token) {
  if (s.req.constraint == nullptr || std::exchange(s.constraint_advanced, false)) {
    return absl::OkStatus();
  }
  if (IsStopToken(s.req.stop, token)) return absl::OkStatus();
  return s.req.constraint->Advance(token);
}

absl::StatusOr<SampleResult> Engine::SampleConstrained(Seq& s, absl::Span<const float> row) {
  TokenConstraint& c = *s.req.constraint;
  const StopParams& stop = s.req.stop;
  if (const std::optional<int32_t> forced = c.Forced()) {
    s.mask_ready = false;
    ASSIGN_OR_RETURN(SampleResult r, s.sampler->Take(row, *forced));
    if (!IsStopToken(stop, r.token)) {
      RETURN_IF_ERROR(c.Advance(r.token));
      s.constraint_advanced = true;
    }
    return r;
  }
  const std::vector<int32_t> stops = StopTokens(stop);
  // Within min_tokens no stop token may come (nor would it end the output).
  const bool within_min = static_cast<int64_t>(s.generated.size()) < stop.min_tokens;
  std::vector<uint64_t>& allowed = s.mask;
  if (!std::exchange(s.mask_ready, false)) {  // PrepareMasks makes it for every constrained row
    allowed.assign((row.size() + 63) / 64, 0);
    c.FillAllowed(absl::MakeSpan(allowed));
  }
  // A stop token ends the output: only once it is complete (a stop token with bytes, say a user's
  // stop_token_ids of ",", is no continuation before that).
  const bool complete = c.Complete();
  for (const int32_t t : stops) {
    if (t < 0 || static_cast<size_t>(t) >= row.size()) continue;
    const uint64_t bit = uint64_t{1} << (t % 64);
    uint64_t& word = allowed[static_cast<size_t>(t) / 64];
    word = complete && !within_min ? word | bit : word & ~bit;
  }
  if (std::all_of(allowed.begin(), allowed.end(), [](uint64_t w) { return w == 0; })) {
    if (complete) return SampleResult{};
    return absl::InvalidArgumentError(
        "structured output: no token of the vocabulary can continue the output here");
  }
  ASSIGN_OR_RETURN(SampleResult r, s.sampler->Sample(row, s.PenaltyPrompt(), s.generated, allowed));
  if (std::find(stops.begin(), stops.end(), r.token) == stops.end()) {
    RETURN_IF_ERROR(c.Advance(r.token));
    s.constraint_advanced = true;
  }
  return r;
}

void Engine::Emit(Seq& s, SampleResult r, StepOutput& out) {
  s.generated.push_back(r.token);
  s.tokens.push_back(r.token);
  if (static_cast<int64_t>(s.generated.size()) == s.req.stop.min_tokens) s.sampler->Unban();
  ++out.generation_tokens;
  TokenEvent event;
  if (s.first_token == absl::InfinitePast()) {
    s.first_token = absl::Now();
    event.usage.queue_seconds = absl::ToDoubleSeconds(s.scheduled - s.submitted);
    event.usage.ttft_seconds = absl::ToDoubleSeconds(s.first_token - s.submitted);
    // What the prompt cost is known now: streams report it before the end.
    event.usage.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
    event.usage.cached_tokens = s.cached;
  }
  const std::string delta = s.detok ? s.detok->Push(r.token) : std::string();
  StopOutput stop = s.stop->Append(r.token, delta);
  if (s.trace) TraceReply(s, delta, stop);
  event.request = s.id;
  event.token = r.token;
  event.text = std::move(stop.text);
  event.logprob = r.logprob;
  event.top_logprobs = std::move(r.top_logprobs);
  if (s.req.prompt_logprobs && !std::exchange(s.prompt_lp_sent, true)) {
    event.prompt_logprobs = std::move(s.prompt_lp);
  }
  if (!stop.finished()) {
    out.emits.push_back({&s.sink, std::move(event)});
    return;
  }
  event.stop_token = stop.stop_token_id;
  event.stop_string = std::move(stop.stop_string);
  const linfer::Finish why =
      stop.finish_reason == FinishReason::kStop ? Finish::kStop : Finish::kLength;
  if (s.trace && event.stop_string && TrimSessionReply(s, why, event)) return;  // held
  Finish(s, why, absl::OkStatus(), out, std::move(event));
}

void Engine::SavePrefix(Seq& s, StepOutput& out) {
  const absl::Span<const int32_t> key(s.tokens.data(), static_cast<size_t>(s.computed));
  s.last_snapshot = s.computed;
  if (prefix_.Contains(s.prefix_tag, key)) return;
  const absl::Time t0 = absl::Now();
  absl::Cleanup timed = [&] { out.snapshot_seconds += absl::ToDoubleSeconds(absl::Now() - t0); };
  // Device tier: a copy into a free slot (device to device), while more slots are free than
  // waiting requests could take and the tier's token lists have room for this key (inserted as the
  // least recently used, it would be the first released).
  if (prefix_.device_tier() && pool_.free_slots() > static_cast<int>(waiting_.size()) &&
      prefix_.DeviceTierFits(static_cast<int64_t>(key.size()))) {
    if (absl::StatusOr<int> spare = pool_.Duplicate(ctx_, s.slot); spare.ok() && *spare >= 0) {
      // The least recently used of the tier: the pool takes these back before the states of
      // finished requests (the longest prefixes, which a resend resumes from).
      prefix_.InsertSlot(s.prefix_tag, key, *spare, /*recent=*/false);
      return;
    }
  }
  HostState state;  // hybrid models: the KV blocks are pinned, not copied (copy-on-write)
  if (absl::Status st = pool_.Snapshot(ctx_, s.slot, &state); !st.ok()) {
    Log(LogLevel::kError, absl::StrCat("prefix cache: saving request ", s.id, ": ", st.ToString()));
    return;
  }
  prefix_.Insert(s.prefix_tag, key, std::move(state));
}

bool Engine::KeepPrefixSlot(Seq& s, StepOutput& out) {
  if (!prefix_.device_tier()) {
    SavePrefix(s, out);
    return false;
  }
  s.last_snapshot = s.computed;
  prefix_.InsertSlot(s.prefix_tag, {s.tokens.data(), static_cast<size_t>(s.computed)}, s.slot);
  return true;  // the cache holds the slot now (or has freed it: it had this prefix already)
}

void Engine::Finish(Seq& s, linfer::Finish why, absl::Status error, StepOutput& out,
                    TokenEvent event) {
  // Feeding a stop-string-cut reply again, cut short: the request ends as it was going to (or with
  // the error), the state holding the part of the visible reply fed so far.
  if (s.refeed) {
    EndRefeed(s, out, why == Finish::kError ? std::move(error) : absl::OkStatus());
    return;
  }
  DropStateCopy(s.clean_state);
  if (why == Finish::kError) error = LoseDeviceIf(error);
  event.request = s.id;
  event.finish = why;
  event.error = std::move(error);
  if (s.req.prompt_logprobs && s.computed >= s.prompt_end &&
      !std::exchange(s.prompt_lp_sent, true)) {
    event.prompt_logprobs = std::move(s.prompt_lp);
  }
  // Whatever the detokenizer still holds (an incomplete UTF-8 tail) ends the text, unless a stop
  // token or string cut the text here (a stop string in the output: the text ends with it, and a
  // session's state too).
  const bool cut = why == Finish::kStop &&
                   (!s.req.stop.include_stop_str_in_output || event.stop_string.has_value());
  const std::string tail = s.detok && !cut ? s.detok->Flush() : std::string();
  if (why == Finish::kStop || why == Finish::kLength) {
    event.text += tail;
  } else {
    event.text += s.stop->Flush() + tail;
  }
  event.usage.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  event.usage.cached_tokens = s.cached;
  event.usage.completion_tokens = static_cast<int64_t>(s.generated.size());
  if (s.scheduled != absl::InfinitePast()) {
    event.usage.queue_seconds = absl::ToDoubleSeconds(s.scheduled - s.submitted);
  }
  if (s.first_token != absl::InfinitePast()) {
    event.usage.ttft_seconds = absl::ToDoubleSeconds(s.first_token - s.submitted);
  }
  event.usage.total_seconds = absl::ToDoubleSeconds(absl::Now() - s.submitted);
  if (!s.req.partial || why != Finish::kLength) ++out.finished_by[std::string(FinishName(why))];
  ++out.finished;
  // Release the state: a session keeps it (the last sampled token pending; or, when the prompt
  // was cut short, its state from before the request), a one-off frees it. A request never
  // admitted left the session as it was and is no turn (though a prefix-cache hit counted tokens
  // as computed; and a request refused before admission, an empty prompt, has nothing to compute).
  // A failed step may have moved the state part of the way: back to the copy from before the
  // prompt when there is one, else (a prompt of one step, a reply's token) the session's state is
  // lost, and its next request says so.
  if (s.session != nullptr) {
    if (s.forward_failed) {
      const bool restored = s.checkpoint && RollBack(s);
      sessions_.Release(s.session, s.session_pending, /*turn=*/false);
      if (!restored) sessions_.MarkLost(s.session, event.error);
    } else if (!s.admitted_once ||
               (s.computed < s.prompt_end && (s.computed == 0 || s.checkpoint))) {
      if (s.computed > 0 && s.checkpoint) RollBack(s);
      sessions_.Release(s.session, s.session_pending, /*turn=*/false);
    } else {
      std::optional<int32_t> pending;
      if (s.computed + 1 == static_cast<int64_t>(s.tokens.size()) && !s.generated.empty()) {
        pending = s.tokens.back();
      }
      const absl::Span<const int32_t> fed = absl::MakeConstSpan(s.tokens).first(
          std::min(static_cast<size_t>(s.computed), s.tokens.size()));
      const int64_t in_state = s.slot >= 0 ? pool_.position(s.slot) : s.session->position;
      event.session_end = TokenEvent::SessionEnd{in_state + (pending ? 1 : 0), pending};
      sessions_.Release(s.session, pending, /*turn=*/true, fed);
    }
    DropStateCopy(s.checkpoint);
  } else if (s.slot >= 0) {
    // The whole conversation so far (prompt + completion, less the last sampled token, which was
    // never fed) for the client that resends it next turn.
    const bool keep = (why == Finish::kStop || why == Finish::kLength) &&
                      s.computed > s.last_snapshot && prefix_.enabled();
    if (!keep || !KeepPrefixSlot(s, out)) pool_.Free(s.slot);
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), s.id);
  if (w != waiting_.end()) waiting_.erase(w);
  if (!s.admitted_once) {
    ++out.dequeued;
    out.dequeued_tokens += static_cast<int64_t>(s.req.prompt.size());
  }
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  out.emits.push_back({&s.sink, std::move(event)});
  // Keep the Seq (and its sink) alive until the events are emitted.
  auto it = seqs_.find(s.id);
  out.done.push_back(std::move(it->second));
  seqs_.erase(it);
}

}  // namespace linfer
