// CUDA benchmarks of single ops at Hopper-sized shapes (registered by cuda_recurrence_benchmark's
// main, with its device context and copy probe; see that file for cold/warm):
//   Attention/prefill/<N>x<L>/<cold|warm> — Qwen3.5-0.8B's attention op (8 query / 2 kv heads ×
//     256, paged f32 KV in blocks of 64), N prompts of L tokens from an empty cache: tokens/s and
//     TFLOP/s (2·2·d per visible key per query head: q·k and p·v).
//   Attention/decode/ctx:C/<cold|warm>/batch:B — one token per sequence after C cached tokens:
//     KV bytes read per second (kv_GBps) and its ratio to the copy (vs_copy).
//   Linear/<name>[-fp8]/<cold|warm>/rows:M — y = x·wᵀ with bf16 (or fp8 + f32 scales in
//     blocks of 128 columns, kept as stored) weights [N, K] for M rows (decode
//     batches): weight bytes read per second (weight_GBps) and its ratio to the copy (vs_copy; a
//     product that streams its weights once is bound by it). Shapes of a 1.3B GDN layer and
//     Qwen3.5-0.8B's LM head. LINFER_CUDA_GEMV=1 takes GemvKernel at M ≤ 8 (tests/gpu/
//     run_on_gpu.sh runs them both ways).
//   Moe/qwen3.6-35b-a3b[-fp8]/<cold|warm>/tokens:B — one MoE layer's routing and experts (MoeRoute
//   +
//     MoeExperts; not the router GEMM or the shared expert) of Qwen3.5/3.6-35B-A3B (D 2048, 256
//     experts of width 512, top 8, bf16) for B tokens with random router logits: the bytes of the
//     distinct experts they touch (each read at least once) per second (expert_GBps), its ratio to
//     the copy (vs_copy), and how many times over the kernels read them (reread: B·k / distinct;
//     the first CUDA twin reads each pair's expert whole).
// LINFER_CUDA_ATTENTION=simple runs the attention without its tiled prefill and split decode
// kernels, =tiled with the f32 tiled prefill, =staged with the tensor-core prefill reading bf16
// K/Vᵀ tiles staged once per segment, =flash with the same tiles, a block per head's columns and
// copies overlapped (run_on_gpu.sh runs the Attention benchmarks all five ways).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/transfer.h"
#include "tests/bench/cuda_bench_util.h"

namespace linfer::bench {
namespace {

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

// One Linear of bf16 weights [n, k] on m rows of x (the device rounds x to bf16 itself).
// A weight of `shape` for the benchmarks (zeros: the values do not change the traffic): bf16, or
// fp8 bytes with f32 scales in blocks of 128 columns (Qwen's -FP8 checkpoints). Its bytes.
std::pair<Tensor, double> BenchWeight(DType dtype, const Shape& shape, const char* what) {
  Tensor w = Empty(dtype, shape, what);
  Check(ZeroTensor(g_ctx->exec(), w.view()), "zero weights");
  double bytes = static_cast<double>(w.nbytes());
  if (dtype != DType::kF8E4M3) return {std::move(w), bytes};
  Shape scale_shape = shape;
  scale_shape.back() = (shape.back() + 127) / 128;
  Tensor scales = Empty(DType::kF32, scale_shape, "scales");
  Check(ZeroTensor(g_ctx->exec(), scales.view()), "zero scales");
  bytes += static_cast<double>(scales.nbytes());
  absl::StatusOr<Tensor> kept = Tensor::Scaled(std::move(w), std::move(scales), 128);
  Check(kept.status(), "scaled weight");
  return {*std::move(kept), bytes};
}

void LinearOf(benchmark::State& state, int64_t n, int64_t k, bool cold, DType dtype) {
  const int64_t m = state.range(0);
  Tensor x = Filled({m, k}, -1, 1, 21), y = Filled({m, n}, 0, 0, 22);
  auto [w, bytes] = BenchWeight(dtype, {n, k}, "weights");
  auto run = [&] {
    g_ctx->arena().Reset();
    Check(Linear(g_ctx->exec(), x.view(), w.view(), y.view()), "linear");
  };
  run();
  Check(g_ctx->Synchronize(), "sync");
  for (auto _ : state) state.SetIterationTime(TimeOnce(cold, run));
  state.counters["weight_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_copy"] =
      benchmark::Counter(2 * bytes / g_copy_gbps, benchmark::Counter::kIsIterationInvariantRate);
}

// One MoE layer's experts for `tokens` tokens at the 35B-A3B shape (weights zero: their values do
// not change the kernels' traffic; the routing comes from random logits).
void MoeExpertsOf(benchmark::State& state, bool cold, DType dtype) {
  constexpr int64_t kD = 2048, kE = 256, kI = 512, kK = 8;
  const int64_t t = state.range(0);
  Tensor x = Filled({t, kD}, -1, 1, 31), y = Filled({t, kD}, 0, 0, 32);
  Tensor logits = Filled({t, kE}, -4, 4, 33);
  Tensor idx = Empty(DType::kI32, {t, kK}, "idx"), w = Empty(DType::kF32, {t, kK}, "weights");
  auto [gate_up, gate_up_bytes] = BenchWeight(dtype, {kE, 2 * kI, kD}, "gate_up");
  auto [down, down_bytes] = BenchWeight(dtype, {kE, kD, kI}, "down");
  auto run = [&] {
    g_ctx->arena().Reset();
    Check(MoeRoute(g_ctx->exec(), logits.view(), idx.view(), w.view()), "route");
    Check(MoeExperts(g_ctx->exec(), x.view(), idx.view(), w.view(), gate_up.view(), down.view(),
                     nullptr, y.view(), true),
          "experts");
  };
  run();
  Check(g_ctx->Synchronize(), "sync");
  std::vector<int32_t> ids(static_cast<size_t>(t * kK));
  Check(Download(g_ctx->exec(), idx.view(), ids.data()), "download ids");
  Check(g_ctx->Synchronize(), "sync");
  std::vector<bool> seen(kE, false);
  int64_t distinct = 0;
  for (int32_t e : ids) distinct += !seen[e], seen[e] = true;
  for (auto _ : state) state.SetIterationTime(TimeOnce(cold, run));
  const double bytes = (gate_up_bytes + down_bytes) / kE * static_cast<double>(distinct);
  state.counters["expert_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_copy"] =
      benchmark::Counter(2 * bytes / g_copy_gbps, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["reread"] = static_cast<double>(t * kK) / static_cast<double>(distinct);
}

}  // namespace

void RegisterOpBenchmarks() {
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    for (bool cold : {true, false}) {
      const std::string name = absl::StrCat(
          "Moe/qwen3.6-35b-a3b", dtype == DType::kBF16 ? "" : "-fp8", "/", cold ? "cold" : "warm");
      benchmark::RegisterBenchmark(name.c_str(), MoeExpertsOf, cold, dtype)
          ->ArgName("tokens")
          ->Arg(1)
          ->Arg(16)
          ->Arg(64)
          ->Arg(256)
          ->UseManualTime()
          ->Iterations(20)
          ->Unit(benchmark::kMicrosecond);
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
  struct Shape2 {
    const char* name;
    int64_t n, k;
  };
  // fla 1.3B GDN (D 2048, 16 heads × 128 keys, values 2×) and Qwen3.5-0.8B's LM head.
  const Shape2 shapes[] = {{"gdn1.3b-in_proj", 12320, 2048},
                           {"gdn1.3b-o_proj", 2048, 4096},
                           {"gdn1.3b-gate_up", 11264, 2048},
                           {"gdn1.3b-down", 2048, 5632},
                           {"qwen3.5-lm_head", 248320, 1024}};
  // The same products with fp8 weights kept as stored ("<name>-fp8": the fp8 GEMV at 1–32 rows,
  // in passes of 8; the tensor-core kernel at 64), but the LM head (never quantized). 16 and
  // 32 rows: where the GEMV's passes and the widening cross.
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    for (const Shape2& s : shapes) {
      if (dtype == DType::kF8E4M3 && s.n == 248320) continue;
      for (bool cold : {true, false}) {
        const std::string name = absl::StrCat(
            "Linear/", s.name, dtype == DType::kBF16 ? "" : "-fp8", "/", cold ? "cold" : "warm");
        benchmark::RegisterBenchmark(name.c_str(), LinearOf, s.n, s.k, cold, dtype)
            ->ArgName("rows")
            ->Arg(1)
            ->Arg(4)
            ->Arg(8)
            ->Arg(16)
            ->Arg(32)
            ->Arg(64)
            ->UseManualTime()
            ->Iterations(50)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace linfer::bench
