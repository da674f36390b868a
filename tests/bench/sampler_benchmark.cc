// Host cost of sampling one row of a 248,320-token vocabulary (Qwen3.5's), one thread: the whole
// row (what a request costs when its row comes back from the device: Sampler::Sample) against
// the pre-sampled row (Sampler::SampleTop from the device's 64 best, log-sum-exp and draw), for an
// OpenAI client's default request (temperature 1 over the whole row) and Qwen3.5's recommended
// one (temperature 0.7, top-k 20, top-p 0.8, presence penalty 1.5, 200 tokens of output). The
// whole row also costs its 1 MB download (not timed here). Logits ~ N(0, 4²) (peaked, as a
// trained model's).
//   build/tests/bench/sampler_benchmark [--benchmark_filter=...]
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampler.h"
#include "kernels/presample.h"
#include "kernels/tensor.h"

namespace linfer {
namespace {

constexpr int64_t kVocab = 248320, kRows = 16, kK = kMaxPresampleK;

struct Rows {
  std::vector<float> x;
  std::vector<int32_t> ids, argmax, drawn;
  std::vector<float> top, lse, inv_t, drawn_logit;
  std::vector<int64_t> bits;
  std::vector<double> weight_sum;
};

// kRows rows and what the device pre-sampler gives for them (its CPU twin), with draws at
// temperature `t` from the uniforms a sampler seeded 1 draws.
Rows MakeRows(float t) {
  Rows r;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  r.x.resize(kRows * kVocab);
  for (float& v : r.x) v = normal(gen);
  r.ids.resize(kRows * kK);
  r.top.resize(kRows * kK);
  r.argmax.resize(kRows);
  r.lse.resize(kRows);
  r.inv_t.assign(kRows, 1.0f / t);
  SamplingParams p;
  p.temperature = t;
  p.seed = 1;
  Sampler s(p);
  for (int64_t i = 0; i < kRows; ++i) {
    r.bits.push_back(static_cast<int64_t>(s.DrawAhead()));
    (void)s.Sample({r.x.data(), static_cast<size_t>(kVocab)}, {}, {});  // the next uniform
  }
  r.weight_sum.resize(kRows);
  r.drawn.resize(kRows);
  r.drawn_logit.resize(kRows);
  const ExecContext ctx = CpuContext();
  const PresampleOutput out{TensorView(r.ids.data(), DType::kI32, {kRows, kK}),
                            TensorView(r.top.data(), DType::kF32, {kRows, kK}),
                            TensorView(r.argmax.data(), DType::kI32, {kRows}),
                            TensorView(r.lse.data(), DType::kF32, {kRows})};
  const PresampleDraws d{TensorView(r.inv_t.data(), DType::kF32, {kRows}),
                         TensorView(r.bits.data(), DType::kI64, {kRows}),
                         TensorView(r.weight_sum.data(), DType::kF64, {kRows}),
                         TensorView(r.drawn.data(), DType::kI32, {kRows}),
                         TensorView(r.drawn_logit.data(), DType::kF32, {kRows})};
  if (!Presample(ctx, TensorView(r.x.data(), DType::kF32, {kRows, kVocab}), out, &d).ok()) {
    std::abort();
  }
  return r;
}

SamplingParams Params(bool qwen) {
  SamplingParams p;
  p.seed = 1;
  if (qwen) {
    p.temperature = 0.7f;
    p.top_k = 20;
    p.top_p = 0.8f;
    p.presence_penalty = 1.5f;
  }
  return p;
}

std::vector<int32_t> Output(const Rows& r) {  // 200 tokens, some of them among the best
  std::vector<int32_t> out;
  for (int i = 0; i < 200; ++i) out.push_back(i % 4 == 0 ? r.ids[(i / 4) % kK] : 1000 + 37 * i);
  return out;
}

// A run's request (Arg 0: temperature 1; 1: Qwen3.5's recommended), its rows and its output.
struct Setup {
  bool qwen;
  SamplingParams params;
  Rows rows;
  std::vector<int32_t> output;
};

Setup MakeSetup(const benchmark::State& state) {
  Setup s;
  s.qwen = state.range(0) == 1;
  s.params = Params(s.qwen);
  s.rows = MakeRows(s.params.temperature);
  if (s.qwen) s.output = Output(s.rows);
  return s;
}

void Report(benchmark::State& state, const Setup& s) {
  state.SetLabel(s.qwen ? "top-k 20, top-p 0.8, presence 1.5" : "temperature 1");
  state.counters["rows_per_s"] =
      benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
}

void BM_WholeRow(benchmark::State& state) {
  const Setup setup = MakeSetup(state);
  const Rows& r = setup.rows;
  Sampler s(setup.params);
  int64_t row = 0;
  for (auto _ : state) {
    const float* x = r.x.data() + (row++ % kRows) * kVocab;
    benchmark::DoNotOptimize(s.Sample({x, static_cast<size_t>(kVocab)}, {}, setup.output));
  }
  Report(state, setup);
}

void BM_PreSampled(benchmark::State& state) {
  const Setup setup = MakeSetup(state);
  const Rows& r = setup.rows;
  Sampler s(setup.params);
  if (!s.SamplesFromTop(static_cast<int>(kK), kVocab)) std::abort();
  int64_t row = 0, whole = 0;
  for (auto _ : state) {
    const int64_t i = row++ % kRows;
    PresampledRow pre{{r.ids.data() + i * kK, static_cast<size_t>(kK)},
                      {r.top.data() + i * kK, static_cast<size_t>(kK)},
                      r.lse[i],
                      kVocab,
                      std::nullopt};
    if (s.NeedsDeviceDraw()) {
      s.DrawAhead();
      pre.draw = PresampledRow::Draw{r.weight_sum[i], r.drawn[i], r.drawn_logit[i]};
    }
    absl::StatusOr<std::optional<SampleResult>> got = s.SampleTop(pre, {}, setup.output);
    if (!got.ok()) std::abort();
    whole += !got->has_value();
    benchmark::DoNotOptimize(got);
  }
  Report(state, setup);
  state.counters["whole_rows"] = static_cast<double>(whole);  // rows SampleTop could not settle
}

BENCHMARK(BM_WholeRow)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PreSampled)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace linfer

BENCHMARK_MAIN();
