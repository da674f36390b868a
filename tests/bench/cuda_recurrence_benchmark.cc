// CUDA benchmarks of the layer-level recurrence on Hopper-sized layers, through the public op (one
// call per layer for all sequences and heads, as the model makes it), timed with CUDA events
// around CUDA-graph replays (decode) or eager calls (prefill), after warm-up, "cold" with the L2
// flushed before every timed call (what serving sees: other layers evict the states) and "warm":
//   Decode/<layer>/<state dtype>/<cold|warm>/batch:B — one token per sequence, B sequences in B
//     slots: state bytes read + written per second (state_GBps) and its ratio to a device-to-device
//     copy measured in this run (vs_copy; the target is ≥ 0.85 at batch ≥ 64). The state
//     dtype "f32+gdnprep" is the f32 step with GdnPrep (raw q, k and gate projections; the q/k
//     L2 norms and the gates inside the step kernel, as the GDN mixers call it): what the fusion
//     costs against "f32".
//   Prefill/<layer>/<N>x<L>/<cold|warm> — chunked prefill of N sequences of L tokens from zero
//     states: time, tokens/s, and "TFLOP/s" in FlashInfer's convention (4·dk·dv per token per
//     value head: the state read/update products only, a yardstick rather than true FLOPs).
// Layers: Qwen3.5-0.8B's GDN (16 qk / 16 v heads, dk = dv = 128) and fla's 1.3B GDN (6 heads,
// dk = 256, dv = 512). And the attention op of Qwen3.5-0.8B's attention layers (8 query / 2 kv
// heads × 256, paged f32 KV in blocks of 64), eager calls:
//   Attention/prefill/<N>x<L>/<cold|warm> — N prompts of L tokens from an empty cache: tokens/s
//     and TFLOP/s (2·2·d per visible key per query head: q·k and p·v).
//   Attention/decode/ctx:C/<cold|warm>/batch:B — one token per sequence after C cached tokens:
//     KV bytes read per second (kv_GBps) and its ratio to the copy (vs_copy).
// LINFER_CUDA_ATTENTION=simple runs the attention without its tiled prefill and split decode
// kernels, =tensor with the tensor-core prefill kernel (tests/gpu/run_on_gpu.sh runs the
// Attention benchmarks all three ways).
// Without a GPU the program says so and exits 0.
//   tests/bench/cuda_recurrence_benchmark [--benchmark_filter=Decode] [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/attention.h"
#include "kernels/device_context.h"
#include "kernels/device_memory.h"
#include "kernels/norm.h"
#include "kernels/recurrence.h"
#include "kernels/transfer.h"

namespace linfer {
namespace {

struct Layer {
  const char* name;
  int heads, dk, dv;
};
constexpr Layer kLayers[] = {{"qwen3.5-0.8b", 16, 128, 128}, {"fla-1.3b", 6, 256, 512}};

DeviceContext* g_ctx = nullptr;
double g_copy_gbps = 0;   // device-to-device copy, bytes read + written per second
void* g_flush = nullptr;  // 2 × L2 bytes, rewritten before every cold timed call
size_t g_flush_bytes = 0;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::abort();
  }
}
void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}
cudaStream_t Stream() { return static_cast<cudaStream_t>(g_ctx->exec().stream); }

// An uninitialised device tensor (aborts naming `what` if it cannot be had).
Tensor Empty(DType dtype, Shape shape, const char* what) {
  absl::StatusOr<Tensor> t = Tensor::Empty(dtype, shape, Device::kCuda);
  Check(t.status(), what);
  return *std::move(t);
}

// A device tensor of `shape` holding `host`'s values (segment and block tables).
template <typename T>
Tensor Uploaded(const std::vector<T>& host, DType dtype, Shape shape, const char* what) {
  Tensor t = Empty(dtype, shape, what);
  Check(Upload(g_ctx->exec(), host.data(), t.view()), what);
  return t;
}

// A device tensor of `shape` with every element zero.
Tensor Zeros(DType dtype, Shape shape, const char* what) {
  Tensor t = Empty(dtype, shape, what);
  Check(ZeroTensor(g_ctx->exec(), t.view()), what);
  return t;
}

// A device f32 tensor of `shape` filled with uniform values in [lo, hi) (a cheap host LCG).
Tensor Filled(Shape shape, float lo, float hi, uint32_t seed) {
  Tensor t = Empty(DType::kF32, shape, "alloc");
  std::vector<float> host(static_cast<size_t>(t.numel()));
  uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  for (float& v : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
  }
  Check(Upload(g_ctx->exec(), host.data(), t.view()), "upload");
  Check(g_ctx->Synchronize(), "sync");
  return t;
}

// One layer call's device inputs for `tokens` packed rows in `seqs` segments of `len` tokens.
struct Problem {
  Tensor q, k, v, g, beta, a_log, dt_bias, state, o, table;
  std::vector<Segment> segs;
  RecurrenceSpec spec;
  RecurrenceInputs in;

  // gdn_prep: raw q, k, a (in g) and b (in beta) with GdnPrep, else prepared inputs.
  Problem(const Layer& l, int64_t seqs, int64_t len, DType state_dtype, bool gdn_prep = false) {
    const int64_t t = seqs * len, h = l.heads;
    q = Filled({t, h * l.dk}, -1, 1, 1);
    k = Filled({t, h * l.dk}, -1, 1, 2);
    if (!gdn_prep) Check(L2Normalize(g_ctx->exec(), k.view(), l.dk, 1e-6f, k.view()), "l2norm");
    v = Filled({t, h * l.dv}, -1, 1, 3);
    g = gdn_prep ? Filled({t, h}, -2.0f, 2.0f, 4) : Filled({t, h}, -0.2f, -0.01f, 4);
    beta = gdn_prep ? Filled({t, h}, -2.0f, 2.0f, 5) : Filled({t, h}, 0.1f, 0.9f, 5);
    o = Filled({t, h * l.dv}, 0, 0, 6);
    state = Zeros(state_dtype, {seqs, h, l.dk, l.dv}, "state");
    for (int64_t i = 0; i < seqs; ++i) segs.push_back({i * len, len, 0, i});
    table = Uploaded(segs, DType::kI64, {seqs, 4}, "segment table");
    spec = {l.dk, l.dv, DecayKind::kScalar, true, false, 1.0f / std::sqrt(float(l.dk))};
    in.q = q.view();
    in.k = k.view();
    in.v = v.view();
    in.g = g.view();
    in.beta = beta.view();
    if (gdn_prep) {
      a_log = Filled({h}, -1.0f, 1.0f, 7);
      dt_bias = Filled({h}, -1.0f, 1.0f, 8);
      in.gdn = GdnPrep{a_log.view(), dt_bias.view(), 1.0f, 1e-6f};
    }
    Check(g_ctx->Synchronize(), "sync");
  }
  absl::Status Run() {
    g_ctx->arena().Reset();
    return Recurrence(g_ctx->exec(), spec, in, {segs, table.view()}, state.view(), {}, {},
                      o.view());
  }
};

// Times `launch` with events; `cold` first overwrites the flush buffer (evicting L2).
double TimeOnce(bool cold, const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "event");
  CheckCuda(cudaEventCreate(&stop), "event");
  static int salt = 0;
  if (cold) CheckCuda(cudaMemsetAsync(g_flush, ++salt & 0xff, g_flush_bytes, Stream()), "flush");
  CheckCuda(cudaEventRecord(start, Stream()), "record");
  launch();
  CheckCuda(cudaEventRecord(stop, Stream()), "record");
  CheckCuda(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  CheckCuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3;
}

void Decode(benchmark::State& state, const Layer& l, DType dtype, bool gdn_prep, bool cold) {
  const int64_t batch = state.range(0);
  Problem p(l, batch, 1, dtype, gdn_prep);
  for (int i = 0; i < 3; ++i) Check(p.Run(), "warm-up");
  Check(g_ctx->Synchronize(), "sync");
  g_ctx->arena().Reset();
  Check(g_ctx->BeginCapture(), "capture");
  const absl::Status captured = p.Run();
  absl::StatusOr<DeviceGraph> graph = g_ctx->EndCapture();
  Check(captured, "captured call");
  Check(graph.status(), "graph");
  for (auto _ : state) {
    state.SetIterationTime(TimeOnce(cold, [&] { Check(graph->Replay(), "replay"); }));
  }
  const double bytes = 2.0 * static_cast<double>(p.state.nbytes());
  state.counters["state_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copy_GBps"] = g_copy_gbps / 1e9;
  state.counters["vs_copy"] =
      benchmark::Counter(bytes / g_copy_gbps, benchmark::Counter::kIsIterationInvariantRate);
}

void Prefill(benchmark::State& state, const Layer& l, int64_t seqs, int64_t len, bool cold) {
  Problem p(l, seqs, len, DType::kF32);
  Check(p.Run(), "warm-up");
  Check(g_ctx->Synchronize(), "sync");
  for (auto _ : state) {
    Check(ZeroTensor(g_ctx->exec(), p.state.view()), "zero state");
    state.SetIterationTime(TimeOnce(cold, [&] { Check(p.Run(), "prefill"); }));
  }
  const double tokens = static_cast<double>(seqs * len);
  state.counters["tokens_per_s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOPs_fi"] = benchmark::Counter(tokens * l.heads * 4.0 * l.dk * l.dv / 1e12,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

// One attention call of Qwen3.5-0.8B's attention layer: `seqs` segments of `tokens` new tokens
// after `context` cached ones (zeros), a paged cache of blocks of 64 tokens.
struct AttnProblem {
  static constexpr int kQ = 8, kKv = 2, kD = 256, kBlock = 64;
  Tensor q, k, v, o, storage, table, blocks;
  std::vector<Segment> segs;
  std::vector<int32_t> block_ids;
  int64_t max_blocks = 0;

  AttnProblem(int64_t seqs, int64_t tokens, int64_t context) {
    const int64_t t = seqs * tokens;
    q = Filled({t, kQ * kD}, -1, 1, 11);
    k = Filled({t, kKv * kD}, -1, 1, 12);
    v = Filled({t, kKv * kD}, -1, 1, 13);
    o = Filled({t, kQ * kD}, 0, 0, 14);
    max_blocks = (context + tokens + kBlock - 1) / kBlock;
    storage = Zeros(DType::kF32, {seqs * max_blocks, kBlock, 2, kKv, kD}, "kv storage");
    for (int64_t i = 0; i < seqs; ++i) {
      segs.push_back({i * tokens, tokens, context, i});
      for (int64_t b = 0; b < max_blocks; ++b) {
        block_ids.push_back(static_cast<int32_t>(i * max_blocks + b));
      }
    }
    table = Uploaded(segs, DType::kI64, {seqs, 4}, "segment table");
    blocks = Uploaded(block_ids, DType::kI32, {seqs, max_blocks}, "block table");
    Check(g_ctx->Synchronize(), "sync");
  }
  absl::Status Run() {
    g_ctx->arena().Reset();
    const Segments s{segs, table.view(), {block_ids, blocks.view(), max_blocks, kBlock}};
    const AttentionParams p{kQ, kKv, kD, 1.0f / 16.0f, 0};
    return Attention(g_ctx->exec(), q.view(), k.view(), v.view(), s,
                     {KvCacheRef::Kind::kPaged, storage.view()}, p, o.view());
  }
};

void AttentionPrefill(benchmark::State& state, int64_t seqs, int64_t len, bool cold) {
  AttnProblem p(seqs, len, 0);
  Check(p.Run(), "warm-up");
  Check(g_ctx->Synchronize(), "sync");
  for (auto _ : state) {
    state.SetIterationTime(TimeOnce(cold, [&] { Check(p.Run(), "attention"); }));
  }
  const double tokens = static_cast<double>(seqs * len);
  // Σ over a prompt's rows of its visible keys: L(L+1)/2.
  const double keys = static_cast<double>(seqs) * len * (len + 1) / 2;
  state.counters["tokens_per_s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOPs"] =
      benchmark::Counter(keys * AttnProblem::kQ * 4.0 * AttnProblem::kD / 1e12,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void AttentionDecode(benchmark::State& state, int64_t context, bool cold) {
  const int64_t batch = state.range(0);
  AttnProblem p(batch, 1, context);
  Check(p.Run(), "warm-up");
  Check(g_ctx->Synchronize(), "sync");
  for (auto _ : state) {
    state.SetIterationTime(TimeOnce(cold, [&] { Check(p.Run(), "attention"); }));
  }
  const double bytes = static_cast<double>(batch) * (context + 1) * 2 * AttnProblem::kKv *
                       AttnProblem::kD * sizeof(float);
  state.counters["kv_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_copy"] =
      benchmark::Counter(2 * bytes / g_copy_gbps, benchmark::Counter::kIsIterationInvariantRate);
}

// Device-to-device copy of 1 GiB: bytes read + written per second, best of 10.
double MeasureCopy() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CheckCuda(cudaMalloc(&a, bytes), "malloc");
  CheckCuda(cudaMalloc(&b, bytes), "malloc");
  CheckCuda(cudaMemsetAsync(a, 1, bytes, Stream()), "memset");
  double best = 0;
  for (int i = 0; i < 10; ++i) {
    const double s = TimeOnce(false, [&] {
      CheckCuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, Stream()), "copy");
    });
    best = std::max(best, 2.0 * bytes / s);
  }
  cudaFree(a);
  cudaFree(b);
  return best;
}

void Register() {
  for (const Layer& l : kLayers) {
    for (const auto& [dtype, prep] : {std::pair{DType::kF32, false}, std::pair{DType::kBF16, false},
                                      std::pair{DType::kF32, true}}) {
      for (bool cold : {true, false}) {
        const std::string name = absl::StrCat("Decode/", l.name, "/", DTypeName(dtype),
                                              prep ? "+gdnprep" : "", "/", cold ? "cold" : "warm");
        benchmark::RegisterBenchmark(name.c_str(), Decode, l, dtype, prep, cold)
            ->ArgName("batch")
            ->Arg(1)
            ->Arg(16)
            ->Arg(64)
            ->Arg(256)
            ->UseManualTime()
            ->Iterations(200)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    for (auto [seqs, len] : {std::pair<int64_t, int64_t>{8, 8192}, {1, 32768}}) {
      for (bool cold : {true, false}) {
        const std::string name =
            absl::StrCat("Prefill/", l.name, "/", seqs, "x", len, "/", cold ? "cold" : "warm");
        benchmark::RegisterBenchmark(name.c_str(), Prefill, l, seqs, len, cold)
            ->UseManualTime()
            ->Iterations(10)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  for (bool cold : {true, false}) {
    const char* temp = cold ? "cold" : "warm";
    for (auto [seqs, len] : {std::pair<int64_t, int64_t>{8, 4096}, {1, 32768}}) {
      const std::string name = absl::StrCat("Attention/prefill/", seqs, "x", len, "/", temp);
      benchmark::RegisterBenchmark(name.c_str(), AttentionPrefill, seqs, len, cold)
          ->UseManualTime()
          ->Iterations(3)
          ->Unit(benchmark::kMillisecond);
    }
    for (int64_t context : {4096, 32768}) {
      const std::string name = absl::StrCat("Attention/decode/ctx:", context, "/", temp);
      benchmark::RegisterBenchmark(name.c_str(), AttentionDecode, context, cold)
          ->ArgName("batch")
          ->Arg(1)
          ->Arg(16)
          ->Arg(64)
          ->UseManualTime()
          ->Iterations(20)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  benchmark::Initialize(&argc, argv);
  if (!CudaAvailable()) {
    std::printf("no CUDA device (or a build without CUDA): nothing to benchmark\n");
    return 0;
  }
  absl::StatusOr<std::unique_ptr<DeviceContext>> ctx = DeviceContext::Create({Device::kCuda});
  Check(ctx.status(), "device context");
  g_ctx = ctx->get();
  int device = 0, l2 = 0;
  CheckCuda(cudaGetDevice(&device), "device");
  CheckCuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "L2 size");
  g_flush_bytes = 2 * static_cast<size_t>(l2);
  CheckCuda(cudaMalloc(&g_flush, g_flush_bytes), "flush buffer");
  g_copy_gbps = MeasureCopy();
  cudaDeviceProp prop;
  CheckCuda(cudaGetDeviceProperties(&prop, device), "properties");
  std::printf("device: %s, %d SMs, L2 %d MB, device-to-device copy %.0f GB/s (read + write)\n",
              prop.name, prop.multiProcessorCount, l2 >> 20, g_copy_gbps / 1e9);
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("copy_GBps", absl::StrCat(g_copy_gbps / 1e9));
  const char* attention = std::getenv("LINFER_CUDA_ATTENTION");
  benchmark::AddCustomContext("attention", attention != nullptr ? attention : "default");
  Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  cudaFree(g_flush);
  return 0;
}
