// Engine-only benchmark on the CPU or a GPU: generation throughput at 1, 8 and 64 concurrent
// sequences, the scheduler's share of each step, the ratio of decode throughput to the memory-
// bandwidth bound (every decode step reads all weights — f32 on the CPU, bf16 matmuls on CUDA; of a
// mixture of experts the experts its tokens choose, expected under uniform routing —
// and reads and writes each sequence's state, and reads its KV: tokens/s ≤ c · bandwidth / bytes
// per step; bandwidth: a summing read of host memory on the CPU, a device-to-device copy on CUDA
// counted as bytes read + written), and the point of sessions — time to first token of a
// follow-up turn on a session with 4,000 tokens of history vs. re-sending the history. With
// --mixed CxP: the cost of a step that carries decode rows and a prefill chunk together (eager:
// CUDA graphs take decode-only steps) against the two done apart — C sequences decoding (graphed
// steps), then a prompt of P tokens arriving among them, then the same prompt alone. A ratio
// ≤ 1 says splitting a mixed step into a graphed decode part and an eager prefill part could not
// be faster (the split would pay both). It runs twice, cold then warm (see MeasureMixed).
//   build/tests/bench/engine_benchmark [--model DIR] [--device cpu|cuda] [--gen_tokens 64]
//                                      [--history 4000] [--concurrency 1,8,64] [--mixed 64x4096]
//                                      [--temperature 1 (draws over the whole row)]
//                                      [--op_times (CUDA: GPU time per op of the decode steps,
//                                       and of the prefill steps with --prefill)]
// A Qwen3.5-0.8B-shaped hybrid: tests/bench/make_qwen35_bench_model.py DIR, then --model DIR.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/device_context.h"
#include "kernels/device_memory.h"
#include "kernels/gemm.h"
#include "kernels/op_timer.h"
#include "kernels/transfer.h"
#include "models/kv_cache.h"
#include "tests/testing/random_checkpoint.h"

ABSL_FLAG(std::string, model, "",
          "Model directory (default: a random GDN of --random_shape, written to the temp dir)");
ABSL_FLAG(std::string, random_shape, "small",
          "Without --model: small (5M parameters) or 1.3b (fla's delta_net-1.3B shape with GDN "
          "gates: D 2048, 24 layers, 16 heads x 128, vocab 32000; ~1.5B parameters)");
ABSL_FLAG(int, gen_tokens, 64, "Tokens generated per request");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt tokens per request in the throughput runs");
ABSL_FLAG(int, history, 4000, "Session history for the follow-up-turn measurement (0: none)");
ABSL_FLAG(std::string, concurrency, "1,8,64", "Concurrent sequences of the throughput runs");
ABSL_FLAG(std::string, prefill, "",
          "REQUESTSxTOKENS (e.g. 8x4096): also measure prefill throughput of that many prompts "
          "submitted at once, each generating one token");
ABSL_FLAG(std::string, mixed, "",
          "DECODExPROMPT (e.g. 64x4096): also measure mixed prefill+decode steps against "
          "decode-only and prefill-only ones");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda (bf16 matmul weights, as the server)");
ABSL_FLAG(int64_t, max_step_tokens, 1024, "Tokens in one engine step (prefill chunks)");
ABSL_FLAG(std::string, state_dtype, "f32", "f32, or bf16 (cuda)");
ABSL_FLAG(std::string, kv_dtype, "f32", "Attention KV cache: f32, bf16 or fp8 (as linfer serve)");
ABSL_FLAG(
    std::string, weight_dtype, "auto",
    "Matmul weights: f32, bf16, f16 (cpu), or auto (f32 on cpu, bf16 on cuda, as the server)");
ABSL_FLAG(std::string, fp8_weights, "auto",
          "fp8 checkpoints: keep, dequantize, or auto (keep on cpu, dequantize on cuda), as "
          "linfer serve");
ABSL_FLAG(std::string, quantization, "",
          "fp8: quantize the matmul weights to fp8 on load, as linfer serve --quantization");
ABSL_FLAG(bool, batch_invariant, false,
          "CPU: the batch-invariant GEMM and token-by-token recurrences (as linfer serve "
          "--batch_invariant)");
ABSL_FLAG(bool, cuda_graphs, true, "CUDA: replay decode steps as CUDA graphs (as linfer serve)");
ABSL_FLAG(bool, op_times, false,
          "CUDA: time every launch of the decode-only steps one by one (kernels/op_timer.h; the "
          "steps run eagerly: implies --cuda_graphs=false) and print, per concurrency, where "
          "their GPU time went, op by op; with --prefill, the same for the warm round's steps");
ABSL_FLAG(std::string, presample, "auto", "auto|on|off: device pre-sampling (as linfer serve)");
ABSL_FLAG(double, temperature, 0.0,
          "Sampling temperature of every request (0: greedy; > 0: a seeded draw over the whole "
          "row, as an OpenAI client's default request — on the device with pre-sampling, else on "
          "the host from the downloaded row)");
ABSL_FLAG(int64_t, prefix_cache_mb, 0,
          "Prefix cache host budget, MiB (0: off; linfer serve's default is 1024): every request "
          "then saves its state at its prompt's end and at its end");
ABSL_FLAG(bool, prefix_cache_slots, true,
          "With the prefix cache: keep saved states in free slots (as linfer serve), or copy "
          "each to host RAM (--prefix_cache_slots=false)");
ABSL_FLAG(int64_t, state_memory_mb, 256,
          "State slot pool, MiB (the largest concurrency needs "
          "that many slots)");
ABSL_FLAG(int64_t, kv_memory_mb, 1024,
          "KV cache of the attention layers, MiB (long prompts at high concurrency need more)");

namespace linfer {
namespace {

// Requests that ended in an error (a failed step): the figures around them mean nothing.
absl::Mutex failures_mu;
int failures ABSL_GUARDED_BY(failures_mu) = 0;
absl::Status first_failure ABSL_GUARDED_BY(failures_mu);

// The exit status: 1, with the first error, when any request failed.
int ExitStatus() {
  absl::MutexLock l(&failures_mu);
  if (failures == 0) return 0;
  std::fprintf(stderr, "%d requests failed; the first: %s\n", failures,
               first_failure.ToString().c_str());
  return 1;
}

struct Waiter {
  absl::Mutex mu;
  int left = 0;
  std::vector<Usage> usages;
  EventSink Sink() {
    return [this](TokenEvent e) {
      if (e.finish == Finish::kNone) return;
      if (e.finish == Finish::kError) {
        absl::MutexLock l(&failures_mu);
        if (failures++ == 0) first_failure = e.error;
      }
      absl::MutexLock l(&mu);
      usages.push_back(e.usage);
      --left;
    };
  }
  void Wait() {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &left));
  }
};

// The engine's step records (its step observer runs on the engine thread).
struct StepLog {
  absl::Mutex mu;
  std::vector<StepRecord> steps ABSL_GUARDED_BY(mu);
  void Attach(Engine& e) {
    e.SetStepObserver([this](const StepRecord& r) {
      absl::MutexLock l(&mu);
      steps.push_back(r);
    });
  }
  std::vector<StepRecord> Take() {
    absl::MutexLock l(&mu);
    return std::exchange(steps, {});
  }
};

GenerateRequest Request(std::vector<int32_t> prompt, int max_tokens) {
  static uint64_t seed = 0;
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  r.sampling.seed = ++seed;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

// Read bandwidth of the host memory: sums a buffer far larger than the caches (the weights of a
// decode step are read, not written). GB/s, best of 5.
double ProbeReadBandwidth() {
  const size_t n = size_t{256} << 20;  // 1 GiB of floats
  std::unique_ptr<float[]> a(new float[n]);
#pragma omp parallel for
  for (size_t i = 0; i < n; ++i) a[i] = 1.0f;
  double best = 0, sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = omp_get_wtime();
    double sum = 0;
#pragma omp parallel for reduction(+ : sum)
    for (size_t i = 0; i < n; ++i) sum += a[i];
    const double dt = omp_get_wtime() - t0;
    sink += sum;
    best = std::max(best, n * sizeof(float) / dt / 1e9);
  }
  if (sink < 0) std::printf("%f", sink);
  return best;
}

// Copy bandwidth of device memory: 1 GiB device-to-device, best of 5, (read + write) bytes / s.
absl::StatusOr<double> ProbeDeviceCopyBandwidth(Device device) {
  const int64_t n = int64_t{1} << 28;  // floats
  ASSIGN_OR_RETURN(Tensor a, Tensor::Empty(DType::kF32, {n}, device));
  ASSIGN_OR_RETURN(Tensor b, Tensor::Empty(DType::kF32, {n}, device));
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> dc, DeviceContext::Create({.device = device}));
  RETURN_IF_ERROR(ZeroTensor(dc->exec(), a.view()));
  RETURN_IF_ERROR(CopyTensor(dc->exec(), a.view(), b.view()));  // warm-up
  RETURN_IF_ERROR(dc->Synchronize());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(CopyTensor(dc->exec(), a.view(), b.view()));
    RETURN_IF_ERROR(dc->Synchronize());
    const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
    best = std::max(best, 2.0 * n * sizeof(float) / dt / 1e9);
  }
  return best;
}

Usage RunOne(Engine& engine, GenerateRequest r) {
  Waiter w;
  w.left = 1;
  if (!engine.Submit(std::move(r), w.Sink()).ok()) std::abort();
  w.Wait();
  return w.usages[0];
}

// Submits n requests of `prompt_len` random tokens (seeds seed, seed + 1, …), each generating
// `gen`, and waits for them all: the wall-clock seconds, or −1 when one is refused (after the ones
// already submitted have finished, so that no sink outlives its waiter).
double RunBatch(Engine& e, int n, int prompt_len, int gen, int64_t vocab, uint32_t seed) {
  Waiter w;
  w.left = n;
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < n; ++i) {
    const uint32_t s = seed + static_cast<uint32_t>(i);
    if (!e.Submit(Request(testing_util::RandomTokens(prompt_len, vocab, s), gen), w.Sink()).ok()) {
      {
        absl::MutexLock l(&w.mu);
        w.left -= n - i;
      }
      w.Wait();
      return -1;
    }
  }
  w.Wait();
  return absl::ToDoubleSeconds(absl::Now() - t0);
}

// "AxB" with A, B ≥ 1 (--prefill, --mixed).
bool ParseProduct(const std::string& spec, int* a, int* b) {
  std::vector<std::string> parts = absl::StrSplit(spec, 'x');
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], a) && absl::SimpleAtoi(parts[1], b) &&
         *a >= 1 && *b >= 1;
}

// Per-step seconds over the steps between two stats.
double StepSeconds(const EngineStats& a, const EngineStats& b) {
  const int64_t steps = b.steps_total - a.steps_total;
  return steps > 0 ? (b.step_seconds_total - a.step_seconds_total) / steps : 0;
}

// Waits until the engine has run `steps` more steps than in `from` (or 120 s pass).
EngineStats AfterSteps(Engine& e, const EngineStats& from, int64_t steps) {
  const absl::Time limit = absl::Now() + absl::Seconds(120);
  EngineStats now = e.Stats();
  while (now.steps_total - from.steps_total < steps && absl::Now() < limit) {
    absl::SleepFor(absl::Microseconds(200));
    now = e.Stats();
  }
  return now;
}

// One round of --mixed (see the file comment); `round` seeds its tokens and names its line.
// False on a refused request.
bool MixedRound(Engine& e, int c, int p, int64_t vocab, int64_t max_step_tokens, const char* round,
                int seed) {
  const int64_t chunk = std::min<int64_t>(max_step_tokens - c, p);  // prompt tokens per step
  const int64_t mixed_steps = (p + chunk - 1) / chunk;
  // Decoders that outlive the measurement: 40 decode-only steps, the mixed ones, and spare.
  const int gen = static_cast<int>(64 + 2 * mixed_steps + 64);
  Waiter decoders, first_tokens;
  decoders.left = c;
  first_tokens.left = c;
  for (int i = 0; i < c; ++i) {
    EventSink done = decoders.Sink();
    auto first = std::make_shared<bool>(true);
    EventSink sink = [&first_tokens, done, first](TokenEvent ev) {
      if (*first && ev.token >= 0) {
        *first = false;
        absl::MutexLock l(&first_tokens.mu);
        --first_tokens.left;
      }
      done(std::move(ev));
    };
    if (!e.Submit(Request(testing_util::RandomTokens(8, vocab, seed + i), gen), sink).ok()) {
      return false;
    }
  }
  first_tokens.Wait();
  const EngineStats d0 = AfterSteps(e, e.Stats(), 8);
  const EngineStats d1 = AfterSteps(e, d0, 32);
  Waiter prompt;
  prompt.left = 1;
  if (!e.Submit(Request(testing_util::RandomTokens(p, vocab, seed + 100), 1), prompt.Sink()).ok()) {
    return false;
  }
  prompt.Wait();
  const EngineStats m1 = e.Stats();
  decoders.Wait();
  // The same prompt length alone: its prefill cost per token, scaled to a mixed step's chunk.
  const EngineStats a0 = e.Stats();
  RunOne(e, Request(testing_util::RandomTokens(p, vocab, seed + 101), 1));
  const EngineStats a1 = e.Stats();
  // The steps from the prompt's arrival to its end, against the same decode steps graphed and
  // the prompt's prefill alone.
  const double decode = StepSeconds(d0, d1);
  const int64_t window = m1.steps_total - d1.steps_total;
  const double together = m1.step_seconds_total - d1.step_seconds_total;
  const double alone = a1.step_seconds_total - a0.step_seconds_total;
  std::printf(
      "\nmixed (%s): %d sequences decoding while a %d-token prompt is prefilled in chunks of "
      "%lld: %lld steps, %.3f ms per step; decode-only steps %.3f ms (%lld of %lld graphed), the "
      "prompt alone %.3f ms; together / apart = %.3f / (%.3f + %.3f) ms = %.2f\n",
      round, c, p, static_cast<long long>(chunk), static_cast<long long>(window),
      1e3 * together / std::max<int64_t>(window, 1), 1e3 * decode,
      static_cast<long long>(d1.graph_steps_total - d0.graph_steps_total),
      static_cast<long long>(d1.steps_total - d0.steps_total), 1e3 * alone, 1e3 * together,
      1e3 * decode * window, 1e3 * alone, together / (decode * window + alone));
  return true;
}

// --mixed: two rounds. The first is the first time the engine runs long segments beside short
// ones (on CUDA: the chunked and tensor-core kernels' modules load lazily, the arena grows to a
// mixed step's scratch, cuBLASLt meets new shapes), all of which its "together" pays and its
// "alone" (run after) does not; the second round's ratio is the one that means something. False
// on a malformed spec or a refused request.
bool MeasureMixed(Engine& e, const std::string& spec, int64_t vocab, int64_t max_step_tokens) {
  int c = 0, p = 0;
  if (!ParseProduct(spec, &c, &p) || c >= max_step_tokens) {
    std::fprintf(stderr,
                 "--mixed must be DECODExPROMPT with DECODE < --max_step_tokens, got '%s'\n",
                 spec.c_str());
    return false;
  }
  return MixedRound(e, c, p, vocab, max_step_tokens, "cold", 700) &&
         MixedRound(e, c, p, vocab, max_step_tokens, "warm", 1700);
}

// The op table under an --op_times header: per op its share, time and launches per window.
void PrintOpTable(const OpTimes& t) {
  const double steps = static_cast<double>(t.windows);
  std::printf("  %7s %10s %10s %10s  %s\n", "share", "ms/step", "launches", "us/launch", "op");
  constexpr size_t kRows = 40;
  double rest_ms = 0;
  int64_t rest_launches = 0;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const OpTime& op = t.ops[i];
    if (i >= kRows) {
      rest_ms += op.ms;
      rest_launches += op.launches;
      continue;
    }
    std::printf("  %6.1f%% %10.4f %10.1f %10.2f  %s\n", 100.0 * op.ms / t.ms, op.ms / steps,
                op.launches / steps, 1e3 * op.ms / op.launches, op.label.c_str());
  }
  if (rest_launches > 0) {
    std::printf("  %6.1f%% %10.4f %10.1f %10s  (%zu more ops)\n", 100.0 * rest_ms / t.ms,
                rest_ms / steps, rest_launches / steps, "", t.ops.size() - kRows);
  }
}

// --op_times: where the decode-only steps of one concurrency spent their GPU time, op by op (the
// steps while requests arrive and end, with fewer sequences, are among them), against the
// forward pass's wall time per full decode step (`forward_secs`, eager here) and the step's
// bandwidth bound (`bound_secs`: its bytes over the copy bandwidth).
void PrintOpTimes(int c, const OpTimes& t, double forward_secs, double bound_secs) {
  if (t.windows == 0) {
    std::printf("op times, concurrency %d: no decode-only step was timed\n", c);
    return;
  }
  const double steps = static_cast<double>(t.windows);
  std::printf(
      "op times, concurrency %d: %lld decode-only steps; per step %.3f ms of GPU time in %.1f "
      "launches run back to back (+%.1f untimed): the bound's %.3f ms is %.2f of it; forward "
      "%.3f ms (eager, with the timing events); %lld launches host-paced, %lld gate timeouts\n",
      c, static_cast<long long>(t.windows), t.ms / steps, t.launches / steps, t.untimed / steps,
      1e3 * bound_secs, 1e3 * bound_secs / (t.ms / steps), 1e3 * forward_secs,
      static_cast<long long>(t.host_paced), static_cast<long long>(t.timeouts));
  PrintOpTable(t);
}

// --op_times with --prefill: the warm round's prompt steps, op by op (windows without a gate:
// each launch timed as the host queued it; the host's gaps hide behind a prefill step's kernels
// unless the host falls behind, which `forward_secs`, the forward passes' wall time per step,
// beside the GPU time shows).
void PrintPrefillOpTimes(const OpTimes& t, double forward_secs) {
  if (t.windows == 0) {
    std::printf("op times, prefill: no prompt step was timed\n");
    return;
  }
  const double steps = static_cast<double>(t.windows);
  std::printf(
      "op times, prefill (warm round): %lld prompt steps; per step %.3f ms of GPU time in %.1f "
      "launches (host-paced: no gate) against %.3f ms of forward wall time (%.2f of it on the "
      "GPU)\n",
      static_cast<long long>(t.windows), t.ms / steps, t.launches / steps, 1e3 * forward_secs,
      forward_secs > 0 ? t.ms / steps / (1e3 * forward_secs) : 0.0);
  PrintOpTable(t);
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  absl::ParseCommandLine(argc, argv);
  const std::string shape = absl::GetFlag(FLAGS_random_shape);
  if (shape != "small" && shape != "1.3b") {
    std::fprintf(stderr, "--random_shape must be small or 1.3b, got '%s'\n", shape.c_str());
    return 1;
  }
  absl::StatusOr<std::string> dir;
  if (absl::GetFlag(FLAGS_model).empty() && shape == "1.3b") {
    const std::filesystem::path out =
        std::filesystem::temp_directory_path() / "linfer_bench_gdn_1.3b";
    const absl::Status st = testing_util::WriteRandomGdnCheckpoint(out, {.hidden = 2048,
                                                                         .layers = 24,
                                                                         .heads = 16,
                                                                         .head_dim = 128,
                                                                         .vocab = 32000,
                                                                         .expand_v = 1.0});
    dir = st.ok() ? absl::StatusOr<std::string>(out.string()) : st;
  } else {
    dir = testing_util::ModelDirOrRandom(absl::GetFlag(FLAGS_model));
  }
  LoadOptions load;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, got '%s'\n", device.c_str());
    return 1;
  }
  if (device == "cuda") {
    if (!CudaAvailable()) {
      std::printf("no CUDA device (or a build without CUDA): nothing to measure\n");
      return 0;
    }
    load = {Device::kCuda, DType::kBF16,
            absl::GetFlag(FLAGS_state_dtype) == "bf16" ? DType::kBF16 : DType::kF32};
  }
  const std::string weights = absl::GetFlag(FLAGS_weight_dtype);
  if (weights == "f32" || weights == "bf16" || weights == "f16") {
    load.matrix_dtype = weights == "f32"    ? DType::kF32
                        : weights == "bf16" ? DType::kBF16
                                            : DType::kF16;
  } else if (weights != "auto") {
    std::fprintf(stderr, "--weight_dtype must be auto, f32, bf16 or f16, got '%s'\n",
                 weights.c_str());
    return 1;
  }
  const std::string fp8 = absl::GetFlag(FLAGS_fp8_weights);
  if (fp8 == "keep" || fp8 == "dequantize") {
    load.fp8_weights =
        fp8 == "keep" ? LoadOptions::Fp8Weights::kKeep : LoadOptions::Fp8Weights::kDequantize;
  } else if (fp8 != "auto") {
    std::fprintf(stderr, "--fp8_weights must be auto, keep or dequantize, got '%s'\n", fp8.c_str());
    return 1;
  }
  const std::string quantization = absl::GetFlag(FLAGS_quantization);
  if (quantization != "" && quantization != "none" && quantization != "fp8") {
    std::fprintf(stderr, "--quantization must be fp8 or none, got '%s'\n", quantization.c_str());
    return 1;
  }
  load.quantize_fp8 = quantization == "fp8";
  const std::string kv = absl::GetFlag(FLAGS_kv_dtype);
  if (kv != "f32" && kv != "bf16" && kv != "fp8") {
    std::fprintf(stderr, "--kv_dtype must be f32, bf16 or fp8, got '%s'\n", kv.c_str());
    return 1;
  }
  load.kv_dtype = kv == "bf16" ? DType::kBF16 : kv == "fp8" ? DType::kF8E4M3 : DType::kF32;
  absl::StatusOr<std::unique_ptr<Model>> model =
      dir.ok() ? Model::Load(*dir, load) : absl::StatusOr<std::unique_ptr<Model>>(dir.status());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "model %s: %s, %lld parameters, %lld weight bytes (%s%s), %lld state bytes per sequence\n",
      dir->c_str(), (*model)->config().model_type.c_str(),
      static_cast<long long>((*model)->num_parameters()),
      static_cast<long long>((*model)->weight_bytes()),
      absl::AsciiStrToLower(DTypeName(load.matrix_dtype)).c_str(),
      (*model)->quantized_on_load() ? ", quantized to fp8"
      : (*model)->fp8_kept()        ? ", fp8 kept"
                                    : "",
      static_cast<long long>((*model)->state_bytes()));
  const int64_t vocab = (*model)->vocab_size();
  // Matmul weights at their dtype's size (the norms and gates that stay f32 are a rounding error
  // of the total), or with fp8 weights held the bytes a parameter takes on average (weight_bytes
  // over the parameters: about 1, the embeddings and gates aside). A mixture of experts reads, per
  // MoE layer and step, only the experts its c tokens chose: under uniform routing E·(1 − (1 −
  // k/E)^c) of them (random weights route about uniformly), each 3·I·D weights. (Computed here: the
  // model moves into the engine below.)
  const ModelConfig& cfg = (*model)->config();
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) moe_layers += IsMoeLayer(cfg, l);
  const double expert_params = 3.0 * cfg.moe.intermediate * cfg.hidden_size;
  const double experts = static_cast<double>(cfg.moe.experts), top_k = cfg.moe.top_k;
  const double dense_params = static_cast<double>((*model)->num_parameters()) -
                              static_cast<double>(moe_layers) * experts * expert_params;
  const double matrix_bytes =
      (*model)->fp8_kept()
          ? static_cast<double>((*model)->weight_bytes()) /
                static_cast<double>(std::max<int64_t>((*model)->num_parameters(), 1))
          : static_cast<double>(DTypeSize(load.matrix_dtype));
  auto weight_bytes = [=](int c) {
    const double touched =
        moe_layers > 0 ? experts * (1.0 - std::pow(1.0 - top_k / experts, c)) : 0;
    return matrix_bytes *
           (dense_params + static_cast<double>(moe_layers) * touched * expert_params);
  };

  const int64_t state_bytes = (*model)->state_bytes();
  const int64_t kv_per_token = KvBytesPerToken((*model)->state_specs());
  double gbps = 0;
  if (load.device == Device::kCpu) {
    gbps = ProbeReadBandwidth();
    std::printf(
        "KV %lld bytes per token; host read bandwidth probe: %.2f GB/s (%d threads); OpenBLAS "
        "kernels %s%s\n",
        static_cast<long long>(kv_per_token), gbps, omp_get_max_threads(), BlasCoreName().c_str(),
        BlasCoreUpgrade().empty()
            ? ""
            : " (generic: `linfer` would use OPENBLAS_CORETYPE, set it here)");
  } else {
    absl::StatusOr<double> bw = ProbeDeviceCopyBandwidth(load.device);
    if (!bw.ok()) {
      std::fprintf(stderr, "bandwidth probe: %s\n", bw.status().ToString().c_str());
      return 1;
    }
    gbps = *bw;
    std::printf("KV %lld bytes per token; device copy bandwidth probe: %.1f GB/s\n",
                static_cast<long long>(kv_per_token), gbps);
  }
  EngineOptions options;
  options.state_memory_bytes = absl::GetFlag(FLAGS_state_memory_mb) << 20;
  options.kv_memory_bytes = absl::GetFlag(FLAGS_kv_memory_mb) << 20;
  options.scheduler.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  options.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  options.prefix_cache = MakePrefixCacheOptions(absl::GetFlag(FLAGS_prefix_cache_mb) << 20, 1024);
  options.prefix_cache.device_tier = absl::GetFlag(FLAGS_prefix_cache_slots);
  absl::StatusOr<EngineOptions::Presampling> presample =
      ParsePresampling(absl::GetFlag(FLAGS_presample));
  if (!presample.ok()) {
    std::fprintf(stderr, "%s\n", presample.status().ToString().c_str());
    return 1;
  }
  options.presample = *presample;
  // Declared before the engine, so that they outlive the engine thread that calls them (an early
  // return may leave requests running while the engine is destroyed).
  StepLog log;
  std::unique_ptr<OpTimer> op_timer, prefill_op_timer;
  if (absl::GetFlag(FLAGS_op_times)) {
    absl::StatusOr<std::unique_ptr<OpTimer>> t = OpTimer::Create(load.device);
    absl::StatusOr<std::unique_ptr<OpTimer>> p = OpTimer::Create(load.device);
    if (!t.ok() || !p.ok()) {
      std::fprintf(stderr, "--op_times: %s\n",
                   (t.ok() ? p.status() : t.status()).ToString().c_str());
      return 1;
    }
    op_timer = *std::move(t);
    options.op_timer = op_timer.get();
    // Prompt steps only with --prefill: the concurrency runs' admission steps and --mixed's
    // steps then carry timing events too (their figures stay comparable without --prefill).
    if (!absl::GetFlag(FLAGS_prefill).empty()) {
      prefill_op_timer = *std::move(p);
      options.prefill_op_timer = prefill_op_timer.get();
    }
    options.cuda_graphs = false;
    std::printf("op timing on: decode-only steps run eagerly, each launch timed alone\n");
  }
  auto engine = Engine::Create(*std::move(model), options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  const int gen = absl::GetFlag(FLAGS_gen_tokens), prompt = absl::GetFlag(FLAGS_prompt_tokens);
  RunOne(e, Request(testing_util::RandomTokens(prompt, vocab, 0), 4));  // warm-up
  // Two figures per concurrency: wall-clock generation throughput (admission, the prompts' prefill
  // step and the ragged tail included) and the full decode steps alone (every sequence one token,
  // none ending: what the bound describes), each against the bound; and the step in which they all
  // end (with --prefix_cache_mb, as in linfer serve, it saves each one's state).
  log.Attach(e);
  std::printf("\n%-12s %14s %8s %16s %14s %10s %16s %10s %12s %12s %12s %12s\n", "concurrency",
              "gen tokens/s", "steps", "scheduler/step", "bound tok/s", "of bound",
              "decode-step tok/s", "of bound", "forward ms", "host ms", "first step ms",
              "last step ms");
  std::vector<int> concurrency;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1) return 1;
    concurrency.push_back(n);
  }
  for (int c : concurrency) {
    const EngineStats before = e.Stats();
    log.Take();
    if (op_timer != nullptr) op_timer->Reset();
    const double secs = RunBatch(e, c, prompt, gen, vocab, 1);
    if (secs < 0) return 1;
    const EngineStats after = e.Stats();
    const double sched = after.scheduler_seconds_total - before.scheduler_seconds_total;
    const double step = after.step_seconds_total - before.step_seconds_total;
    // Bytes of one decode step at the mean length (prompt + half the generated tokens).
    const double step_bytes =
        weight_bytes(c) + c * (2.0 * state_bytes + kv_per_token * (prompt + gen / 2.0));
    const double bound = c * gbps * 1e9 / step_bytes;
    // Decode steps: every sequence one token, none ending (the step in which they all end also
    // frees their slots and, with the prefix cache, saves each state: "last step"), but the first
    // ("first step": on CUDA the batch's graph is captured there after an eager step, and with
    // LINFER_CUDA_GEMM_TUNE=1 its products' algorithms are timed — once per process and batch).
    double decode_secs = 0, decode_forward = 0, end_secs = 0, first_secs = -1;
    int64_t decode_tokens = 0, decode_steps = 0, end_steps = 0;
    for (const StepRecord& r : log.Take()) {
      if (r.batch_size != c || r.tokens != c) continue;
      if (r.finished > 0) {
        end_secs += r.seconds;
        ++end_steps;
        continue;
      }
      if (first_secs < 0) {
        first_secs = r.seconds;
        continue;
      }
      decode_secs += r.seconds;
      decode_forward += r.forward_seconds;
      decode_tokens += r.tokens;
      ++decode_steps;
    }
    const double decode_rate =
        decode_secs > 0 ? static_cast<double>(decode_tokens) / decode_secs : 0;
    std::printf("%-12d %14.1f %8lld %15.3f%% %14.1f %9.2fx ", c, c * gen / secs,
                static_cast<long long>(after.steps_total - before.steps_total),
                100.0 * sched / step, bound, c * gen / secs / bound);
    if (decode_tokens > 0) {
      // Per decode step: the forward pass (its launches, the device's work, the logits' or the
      // pre-sampled candidates' download) and the rest on the host (scheduling, sampling, events).
      std::printf("%16.1f %9.2fx %12.3f %12.3f ", decode_rate, decode_rate / bound,
                  1e3 * decode_forward / decode_steps,
                  1e3 * (decode_secs - decode_forward) / decode_steps);
    } else {  // no step carried all c sequences (e.g. the state memory holds fewer)
      std::printf("%16s %10s %12s %12s ", "n/a", "n/a", "n/a", "n/a");
    }
    if (first_secs >= 0) {
      std::printf("%12.3f ", 1e3 * first_secs);
    } else {
      std::printf("%12s ", "n/a");
    }
    if (end_steps > 0) {
      std::printf("%12.3f\n", 1e3 * end_secs / end_steps);
    } else {
      std::printf("%12s\n", "n/a");
    }
    if (op_timer != nullptr) {
      PrintOpTimes(c, op_timer->Totals(), decode_steps > 0 ? decode_forward / decode_steps : 0,
                   step_bytes / (gbps * 1e9));
    }
  }
  // Prefill: N prompts of T tokens at once, one generated token each; twice, with new prompts:
  // the first round is the first time this process runs long segments (on CUDA: lazy module
  // loads, the arena's growth, cuBLASLt's new shapes), the second is the steady rate.
  if (const std::string spec = absl::GetFlag(FLAGS_prefill); !spec.empty()) {
    int n = 0, t = 0;
    if (!ParseProduct(spec, &n, &t)) {
      std::fprintf(stderr, "--prefill must be REQUESTSxTOKENS, got '%s'\n", spec.c_str());
      return 1;
    }
    for (const char* round : {"cold", "warm"}) {
      const uint32_t seed = round[0] == 'c' ? 500 : 500 + static_cast<uint32_t>(n);
      const EngineStats s0 = e.Stats();
      if (prefill_op_timer != nullptr) prefill_op_timer->Reset();
      log.Take();
      const double secs = RunBatch(e, n, t, 1, vocab, seed);
      if (secs < 0) return 1;
      const EngineStats s1 = e.Stats();
      const double steps = s1.step_seconds_total - s0.step_seconds_total;
      const double forward = s1.forward_seconds_total - s0.forward_seconds_total;
      const double snapshots = s1.snapshot_seconds_total - s0.snapshot_seconds_total;
      const double sched = s1.scheduler_seconds_total - s0.scheduler_seconds_total;
      std::printf(
          "\nprefill %d x %d tokens (%s): %.2f s, %.0f prompt tokens/s; %lld steps: forward %.3f "
          "s, prefix snapshots %.3f s, scheduler %.3f s, sampling and the rest %.3f s\n",
          n, t, round, secs, static_cast<double>(n) * t / secs,
          static_cast<long long>(s1.steps_total - s0.steps_total), forward, snapshots, sched,
          steps - forward - snapshots - sched);
      if (prefill_op_timer != nullptr && round[0] == 'w') {
        // The forward time of the steps the timer took (some row more than one token).
        double timed_forward = 0;
        int64_t timed_steps = 0;
        for (const StepRecord& r : log.Take()) {
          if (r.tokens == r.batch_size) continue;
          timed_forward += r.forward_seconds;
          ++timed_steps;
        }
        PrintPrefillOpTimes(prefill_op_timer->Totals(),
                            timed_steps > 0 ? timed_forward / timed_steps : 0);
      }
    }
  }
  if (const std::string spec = absl::GetFlag(FLAGS_mixed); !spec.empty()) {
    if (!MeasureMixed(e, spec, vocab, absl::GetFlag(FLAGS_max_step_tokens))) return 1;
  }
  // Follow-up turn: session with `history` tokens vs. the full history as a new prompt.
  const int history = absl::GetFlag(FLAGS_history);
  if (history <= 0) return ExitStatus();  // --history 0: no follow-up measurement
  if (!e.CreateSession("bench", "").ok()) return 1;
  GenerateRequest first = Request(testing_util::RandomTokens(history, vocab, 99), 1);
  first.session_id = "bench";
  RunOne(e, first);
  std::vector<int32_t> turn = testing_util::RandomTokens(16, vocab, 100);
  GenerateRequest follow = Request(turn, 1);
  follow.session_id = "bench";
  const Usage with_session = RunOne(e, follow);
  std::vector<int32_t> whole = first.prompt;
  whole.insert(whole.end(), turn.begin(), turn.end());
  const Usage without = RunOne(e, Request(whole, 1));
  std::printf(
      "\nfollow-up turn after %d tokens of history: TTFT %.2f ms with the session "
      "(%lld tokens reused), %.2f ms re-sending the history: %.1fx faster\n",
      history, 1e3 * with_session.ttft_seconds, static_cast<long long>(with_session.cached_tokens),
      1e3 * without.ttft_seconds, without.ttft_seconds / with_session.ttft_seconds);
  return ExitStatus();
}
