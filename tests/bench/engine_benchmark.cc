// Engine-only benchmark on the CPU or a GPU: generation throughput at 1, 8 and 64 concurrent
// sequences, the scheduler's share of each step, the ratio of decode throughput to the memory-
// bandwidth bound (every decode step reads all weights — f32 on the CPU, bf16 matmuls on CUDA —
// and reads and writes each sequence's state, and reads its KV: tokens/s ≤ c · bandwidth / bytes
// per step; bandwidth: a summing read of host memory on the CPU, a device-to-device copy on CUDA
// counted as bytes read + written), and the point of sessions — time to first token of a
// follow-up turn on a session with 4,000 tokens of history vs. re-sending the history.
//   build/tests/bench/engine_benchmark [--model DIR] [--device cpu|cuda] [--gen_tokens 64]
//                                      [--history 4000] [--concurrency 1,8,64]
// A Qwen3.5-0.8B-shaped hybrid: tests/bench/make_qwen35_bench_model.py DIR, then --model DIR.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/device_context.h"
#include "kernels/device_memory.h"
#include "kernels/gemm.h"
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
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda (bf16 matmul weights, as the server)");
ABSL_FLAG(int64_t, max_step_tokens, 1024, "Tokens in one engine step (prefill chunks)");
ABSL_FLAG(std::string, state_dtype, "f32", "f32, or bf16 (cuda)");
ABSL_FLAG(
    std::string, weight_dtype, "auto",
    "Matmul weights: f32, bf16, f16 (cpu), or auto (f32 on cpu, bf16 on cuda, as the server)");
ABSL_FLAG(bool, batch_invariant, false,
          "CPU: the batch-invariant GEMM and token-by-token recurrences (as linfer serve "
          "--batch_invariant)");
ABSL_FLAG(bool, cuda_graphs, true, "CUDA: replay decode steps as CUDA graphs (as linfer serve)");
ABSL_FLAG(std::string, presample, "auto", "auto|on|off: device pre-sampling (as linfer serve)");
ABSL_FLAG(int64_t, state_memory_mb, 256,
          "State slot pool, MiB (the largest concurrency needs "
          "that many slots)");

namespace linfer {
namespace {

struct Waiter {
  absl::Mutex mu;
  int left = 0;
  std::vector<Usage> usages;
  EventSink Sink() {
    return [this](TokenEvent e) {
      if (e.finish == Finish::kNone) return;
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

GenerateRequest Request(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
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
  absl::StatusOr<std::unique_ptr<Model>> model =
      dir.ok() ? Model::Load(*dir, load) : absl::StatusOr<std::unique_ptr<Model>>(dir.status());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s: %s, %lld parameters, %lld state bytes per sequence\n", dir->c_str(),
              (*model)->config().model_type.c_str(),
              static_cast<long long>((*model)->num_parameters()),
              static_cast<long long>((*model)->state_bytes()));
  const int64_t vocab = (*model)->vocab_size();
  // Matmul weights at their dtype (the norms and gates that stay f32 are a rounding error of the
  // total).
  const int64_t weight_bytes =
      static_cast<int64_t>(DTypeSize(load.matrix_dtype)) * (*model)->num_parameters();
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
  options.scheduler.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  options.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  absl::StatusOr<EngineOptions::Presampling> presample =
      ParsePresampling(absl::GetFlag(FLAGS_presample));
  if (!presample.ok()) {
    std::fprintf(stderr, "%s\n", presample.status().ToString().c_str());
    return 1;
  }
  options.presample = *presample;
  auto engine = Engine::Create(*std::move(model), options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  const int gen = absl::GetFlag(FLAGS_gen_tokens), prompt = absl::GetFlag(FLAGS_prompt_tokens);
  RunOne(e, Request(testing_util::RandomTokens(prompt, vocab, 0), 4));  // warm-up
  std::printf("\n%-12s %14s %14s %16s %14s %12s\n", "concurrency", "gen tokens/s", "steps",
              "scheduler/step", "bound tok/s", "of bound");
  std::vector<int> concurrency;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1) return 1;
    concurrency.push_back(n);
  }
  for (int c : concurrency) {
    const EngineStats before = e.Stats();
    Waiter w;
    w.left = c;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < c; ++i) {
      if (!e.Submit(Request(testing_util::RandomTokens(prompt, vocab, i + 1), gen), w.Sink()).ok())
        return 1;
    }
    w.Wait();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const EngineStats after = e.Stats();
    const double sched = after.scheduler_seconds_total - before.scheduler_seconds_total;
    const double step = after.step_seconds_total - before.step_seconds_total;
    // Bytes of one decode step at the mean length (prompt + half the generated tokens).
    const double step_bytes =
        weight_bytes + c * (2.0 * state_bytes + kv_per_token * (prompt + gen / 2.0));
    const double bound = c * gbps * 1e9 / step_bytes;
    std::printf("%-12d %14.1f %14lld %15.3f%% %14.1f %11.2fx\n", c, c * gen / secs,
                static_cast<long long>(after.steps_total - before.steps_total),
                100.0 * sched / step, bound, c * gen / secs / bound);
  }
  // Prefill: N prompts of T tokens at once, one generated token each.
  if (const std::string spec = absl::GetFlag(FLAGS_prefill); !spec.empty()) {
    std::vector<std::string> parts = absl::StrSplit(spec, 'x');
    int n = 0, t = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &n) || !absl::SimpleAtoi(parts[1], &t) ||
        n < 1 || t < 1) {
      std::fprintf(stderr, "--prefill must be REQUESTSxTOKENS, got '%s'\n", spec.c_str());
      return 1;
    }
    Waiter w;
    w.left = n;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < n; ++i) {
      if (!e.Submit(Request(testing_util::RandomTokens(t, vocab, 500 + i), 1), w.Sink()).ok())
        return 1;
    }
    w.Wait();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    std::printf("\nprefill %d x %d tokens: %.1f s, %.0f prompt tokens/s\n", n, t, secs,
                static_cast<double>(n) * t / secs);
  }
  // Follow-up turn: session with `history` tokens vs. the full history as a new prompt.
  const int history = absl::GetFlag(FLAGS_history);
  if (history <= 0) return 0;  // --history 0: no follow-up measurement
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
  return 0;
}
