// CPU recurrence benchmarks on 1.3B-shaped layers, through the layer-level Recurrence op (one
// call for all segments and heads, as the model makes it): the one-token decode step
// (memory-bound: reads and writes every state once) reported in GB/s next to a memory-bandwidth
// probe measured in the same run, and chunked prefill reported in tokens/s and GFLOP/s.
//   build/tests/bench/recurrence_benchmark [--benchmark_filter=Decode]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/context.h"
#include "kernels/recurrence.h"
#include "kernels/segments.h"

namespace linfer {
namespace {

struct LayerShape {
  const char* name;
  int heads, dk, dv;
  DecayKind decay;
  bool delta;
};

// fla defaults at hidden 2048 (MODELS.md): GDN 6×256×512, DeltaNet 16×128×128, GLA 4×256×512
// (expand_k 0.5, expand_v 1), RetNet 8×256×512 (expand_k 1, expand_v 2), linear_attn 4×512×512.
constexpr LayerShape kShapes[] = {
    {"gated_deltanet", 6, 256, 512, DecayKind::kScalar, true},
    {"delta_net", 16, 128, 128, DecayKind::kNone, true},
    {"gla", 4, 256, 512, DecayKind::kVector, false},
    {"retnet", 8, 256, 512, DecayKind::kScalar, false},
    {"linear_attn", 4, 512, 512, DecayKind::kNone, false},
};

double g_probe_gbps = 0;  // measured once in main()

// Streams read+write over a buffer far larger than the caches, like a state update does.
double MeasureBandwidth() {
  const size_t n = size_t{64} << 20;  // 256 MB of floats
  std::unique_ptr<float[]> a(new float[n]);
#pragma omp parallel for
  for (size_t i = 0; i < n; ++i) a[i] = 1.0f;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = omp_get_wtime();
#pragma omp parallel for
    for (size_t i = 0; i < n; ++i) a[i] = a[i] * 0.999f + 0.001f;
    const double dt = omp_get_wtime() - t0;
    best = std::max(best, 2.0 * n * sizeof(float) / dt / 1e9);
  }
  benchmark::DoNotOptimize(a[n / 2]);
  return best;
}

// `batch` segments of `t` tokens each, packed row after row, each in its own state slot.
struct Batch {
  std::vector<float> q, k, v, g, beta, o, state;
  std::vector<Segment> segments;
  int64_t rows = 0;
};

Batch MakeBatch(const LayerShape& s, int batch, int64_t t) {
  Batch b;
  b.rows = int64_t{batch} * t;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 0.05f);
  b.q.resize(b.rows * s.heads * s.dk);
  b.k.resize(b.rows * s.heads * s.dk);
  b.v.resize(b.rows * s.heads * s.dv);
  b.o.resize(b.rows * s.heads * s.dv);
  b.g.resize(b.rows * s.heads * (s.decay == DecayKind::kVector ? s.dk : 1), -0.01f);
  b.beta.resize(b.rows * s.heads, 0.5f);
  b.state.resize(int64_t{batch} * s.heads * s.dk * s.dv, 0.0f);
  for (auto* x : {&b.q, &b.k, &b.v}) {
    for (auto& e : *x) e = n(rng);
  }
  for (int i = 0; i < batch; ++i) b.segments.push_back({i * t, t, 0, i});
  return b;
}

TensorView View(std::vector<float>& v, int64_t rows) {
  return TensorView(v.data(), DType::kF32, {rows, static_cast<int64_t>(v.size()) / rows});
}

absl::Status RunLayer(const LayerShape& s, Batch& b, RecurrenceMode mode) {
  RecurrenceInputs in;
  in.q = View(b.q, b.rows);
  in.k = View(b.k, b.rows);
  in.v = View(b.v, b.rows);
  if (s.decay != DecayKind::kNone) in.g = View(b.g, b.rows);
  if (s.delta) in.beta = View(b.beta, b.rows);
  const int64_t slots = static_cast<int64_t>(b.segments.size());
  const TensorView state(b.state.data(), DType::kF32, {slots, s.heads, s.dk, s.dv});
  return Recurrence(CpuContext(), {s.dk, s.dv, s.decay, s.delta, false, 0.06f}, in,
                    HostSegments(b.segments), state, TensorView(), {mode, 64}, View(b.o, b.rows));
}

void BM_DecodeStep(benchmark::State& state, const LayerShape& s) {
  const int batch = static_cast<int>(state.range(0));
  Batch b = MakeBatch(s, batch, 1);
  for (auto _ : state) {
    if (absl::Status st = RunLayer(s, b, RecurrenceMode::kRecurrent); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  const double state_bytes = static_cast<double>(b.state.size()) * sizeof(float);
  state.SetBytesProcessed(static_cast<int64_t>(2 * state_bytes) * state.iterations());
  // Achieved state bandwidth, and its ratio to the probe (target ≥ 0.5).
  state.counters["GB/s"] =
      benchmark::Counter(2 * state_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_probe"] = benchmark::Counter(2 * state_bytes / 1e9 / g_probe_gbps,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ChunkedPrefill(benchmark::State& state, const LayerShape& s) {
  const int batch = 2;
  const int64_t t = state.range(0);
  const int chunk = 64;
  Batch b = MakeBatch(s, batch, t);
  for (auto _ : state) {
    std::fill(b.state.begin(), b.state.end(), 0.0f);
    if (absl::Status st = RunLayer(s, b, RecurrenceMode::kChunked); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  // Per token and head: state products (o += qᵀh, h update, and for the delta rule k·h) cost
  // 2·dk·dv each, intra-chunk scores and their products 2·chunk·(dk + dv)/2 on average.
  const double per_token = 2.0 * s.dk * s.dv * (s.delta ? 3 : 2) + 1.0 * chunk * (s.dk + s.dv);
  const double flops = per_token * s.heads * batch * t;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(batch * t, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  g_probe_gbps = MeasureBandwidth();
  std::printf("memory bandwidth probe (read+write stream, %d threads): %.2f GB/s\n",
              omp_get_max_threads(), g_probe_gbps);
  for (const LayerShape& s : kShapes) {
    benchmark::RegisterBenchmark((std::string("DecodeStep/") + s.name).c_str(), BM_DecodeStep, s)
        ->Arg(1)
        ->Arg(16)
        ->Arg(64)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("ChunkedPrefill/") + s.name).c_str(),
                                 BM_ChunkedPrefill, s)
        ->Arg(1024)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
