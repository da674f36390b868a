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
// dk = 256, dv = 512). The same binary runs the attention and Linear benchmarks
// (cuda_op_benchmarks.cc).
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
#include "kernels/device_context.h"
#include "kernels/device_memory.h"
#include "kernels/norm.h"
#include "kernels/recurrence.h"
#include "kernels/transfer.h"
#include "tests/bench/cuda_bench_util.h"

namespace linfer::bench {
namespace {

struct Layer {
  const char* name;
  int heads, dk, dv;
};
constexpr Layer kLayers[] = {{"qwen3.5-0.8b", 16, 128, 128}, {"fla-1.3b", 6, 256, 512}};

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
  RegisterOpBenchmarks();
}

}  // namespace
}  // namespace linfer::bench

int main(int argc, char** argv) {
  using namespace linfer;
  using namespace linfer::bench;
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
