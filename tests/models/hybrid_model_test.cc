// Hybrid models (Qwen3.5/3.6 in both transformers layouts; fla families with softmax-attention
// layers, full and sliding-window) against the independent float64 reference
// (tests/models/reference/qwen3_5_reference.py, fla_attention_reference.py): logits at every
// position within 1e-4 in every recurrence mode; the prompt fed in pieces (state and KV carried);
// a ragged batch; a fork sharing KV blocks (copy-on-write); state+KV out and back in bit-identical;
// the KV budget refusing cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/fp8.h"
#include "models/model.h"
#include "models/runner.h"
#include "models/safetensors.h"
#include "models/weights.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string name;
  fs::path dir;
  std::vector<int32_t> tokens;
  std::vector<double> logits;  // [T, V]
  std::vector<int64_t> splits;
  int64_t vocab = 0;
  // The reference's logits with the weights quantized on load (--quantization fp8), where the
  // fixture has them (expected.json "fp8_on_load").
  std::vector<double> fp8q_logits;
};

std::vector<Fixture> LoadFixtures() {
  std::vector<Fixture> out;
  const fs::path root = LINFER_HYBRID_FIXTURES;
  std::ifstream list(root / "cases.txt");
  std::string name;
  while (std::getline(list, name)) {
    if (name.empty()) continue;
    Fixture f{name, root / name, {}, {}, {}, 0, {}};
    std::ifstream ej(f.dir / "expected.json");
    nlohmann::json j = nlohmann::json::parse(ej);
    f.tokens = j["tokens"].get<std::vector<int32_t>>();
    f.vocab = j["vocab_size"].get<int64_t>();
    f.splits = j["split_points"].get<std::vector<int64_t>>();
    std::ifstream lf(f.dir / j["logits_file"].get<std::string>(), std::ios::binary);
    f.logits.resize(f.tokens.size() * f.vocab);
    lf.read(reinterpret_cast<char*>(f.logits.data()), f.logits.size() * sizeof(double));
    EXPECT_TRUE(lf.good()) << name;
    if (j.contains("fp8_on_load")) {
      std::ifstream qf(f.dir / j["fp8_on_load"]["logits_file"].get<std::string>(),
                       std::ios::binary);
      f.fp8q_logits.resize(f.logits.size());
      qf.read(reinterpret_cast<char*>(f.fp8q_logits.data()), f.fp8q_logits.size() * sizeof(double));
      EXPECT_TRUE(qf.good()) << name;
    }
    out.push_back(std::move(f));
  }
  return out;
}

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  return fixtures;
}

double RelErr(const float* a, const double* b, int64_t n) {
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

std::unique_ptr<Model> LoadOrDie(const Fixture& f) {
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir);
  EXPECT_TRUE(m.ok()) << f.name << ": " << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

TEST(HybridModelTest, FixturesCoverBothLayoutsAndFla) {
  int qwen_text = 0, qwen_vlm = 0, fla = 0, moe = 0, next = 0;
  for (const Fixture& f : Fixtures()) {
    moe += f.name.starts_with("qwen35moe");   // Qwen3.5 MoE: fused and per-expert tensors
    next += f.name.starts_with("qwen3next");  // Qwen3-Next: fused GDN projections, dense layers
    qwen_text += f.name.starts_with("qwen35_text");
    qwen_vlm += f.name.starts_with("qwen35_vlm");
    fla += f.name.starts_with("gdn_hybrid");
  }
  EXPECT_GE(qwen_text, 5) << LINFER_HYBRID_FIXTURES;
  EXPECT_GE(qwen_vlm, 4);
  EXPECT_GE(fla, 3);
  EXPECT_GE(moe, 2);
  EXPECT_GE(next, 2);
}

TEST(HybridModelTest, LogitsMatchReferenceInEveryMode) {
  for (const Fixture& f : Fixtures()) {
    std::unique_ptr<Model> m = LoadOrDie(f);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(m->state_bytes() > 0) << f.name;
    for (auto [mode, chunk] : {std::pair{RecurrenceMode::kAuto, 64},
                               {RecurrenceMode::kRecurrent, 64},
                               {RecurrenceMode::kChunked, 64},
                               {RecurrenceMode::kChunked, 16}}) {
      SequenceRunner runner(m.get());
      absl::StatusOr<Tensor> logits = runner.Feed(f.tokens, {mode, chunk, true});
      ASSERT_TRUE(logits.ok()) << f.name << ": " << logits.status();
      ASSERT_EQ(logits->numel(), static_cast<int64_t>(f.logits.size())) << f.name;
      EXPECT_LT(RelErr(logits->data<float>(), f.logits.data(), logits->numel()), 1e-4)
          << f.name << " mode=" << static_cast<int>(mode) << " chunk=" << chunk;
    }
  }
}

// The prompt in pieces at the fixture's split points, then token by token: every chunk attends
// to the KV the earlier ones wrote (and the recurrent state carries across).
TEST(HybridModelTest, PiecesAndDecodeEqualOnePass) {
  for (const Fixture& f : Fixtures()) {
    std::unique_ptr<Model> m = LoadOrDie(f);
    ASSERT_NE(m, nullptr);
    const int64_t t = static_cast<int64_t>(f.tokens.size()), v = f.vocab;
    for (auto [mode, chunk] :
         {std::pair{RecurrenceMode::kChunked, 16}, {RecurrenceMode::kRecurrent, 64}}) {
      SequenceRunner runner(m.get());
      std::vector<int64_t> cuts = f.splits;
      if (cuts.back() < t - 6) cuts.push_back(t - 6);  // the last few one by one
      int64_t at = 0;
      for (int64_t cut : cuts) {
        absl::StatusOr<Tensor> l =
            runner.Feed({f.tokens.data() + at, static_cast<size_t>(cut - at)}, {mode, chunk, true});
        ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
        EXPECT_LT(RelErr(l->data<float>(), f.logits.data() + at * v, (cut - at) * v), 1e-4)
            << f.name << " rows " << at << ".." << cut;
        at = cut;
      }
      for (; at < t; ++at) {
        absl::StatusOr<Tensor> l = runner.Feed({&f.tokens[at], 1}, {mode, chunk, false});
        ASSERT_TRUE(l.ok()) << l.status();
        EXPECT_LT(RelErr(l->data<float>(), f.logits.data() + at * v, v), 1e-4)
            << f.name << " step " << at;
      }
    }
  }
}

// Runs one step of `segs` over `states` (reserving KV first) and returns [segments, V] logits.
absl::StatusOr<Tensor> Step(const Model& m, ModelStates& states, const std::vector<int32_t>& tokens,
                            const std::vector<Segment>& segs, bool bf16_inputs = false,
                            bool fold_norms = false, bool batch_invariant = false) {
  Arena arena(Device::kCpu);
  ExecContext ctx = CpuContext(&arena);
  ctx.bf16_matmul_inputs = bf16_inputs;
  ctx.batch_invariant = batch_invariant;
  ctx.fold_input_norms = fold_norms;
  for (const Segment& s : segs) {
    absl::Status st =
        states.ReserveKv(ctx, static_cast<int>(s.slot), s.position + s.num_tokens, s.position);
    if (!st.ok()) return st;
  }
  absl::StatusOr<Tensor> l =
      Tensor::Empty(DType::kF32, {static_cast<int64_t>(segs.size()), m.vocab_size()});
  if (!l.ok()) return l.status();
  absl::Status st = m.Forward(ctx, {tokens, segs}, states, l->view());
  if (!st.ok()) return st;
  return l;
}

// The logits of fixture f's last token after one step over all its tokens in slot 0 (fresh
// states), with the context's bf16 matmul inputs and folded input norms as asked.
absl::StatusOr<std::vector<float>> LastLogits(const Model& m, const Fixture& f, bool bf16_inputs,
                                              bool fold_norms = false,
                                              bool batch_invariant = false) {
  const int64_t n = static_cast<int64_t>(f.tokens.size());
  absl::StatusOr<ModelStates> states =
      ModelStates::Allocate(m.state_specs(), 1, Device::kCpu, true,
                            {KvBytesPerToken(m.state_specs()) * (n + 8), /*block_tokens=*/4});
  if (!states.ok()) return states.status();
  absl::StatusOr<Tensor> l =
      Step(m, *states, f.tokens, {{0, n, 0, 0}}, bf16_inputs, fold_norms, batch_invariant);
  if (!l.ok()) return l.status();
  return std::vector<float>(l->data<float>(), l->data<float>() + f.vocab);
}

// bf16 matmul inputs (kernels/gemm.h MatmulInputDType; on CUDA LINFER_CUDA_BF16_INPUTS=1): the
// block norms and Qwen3.5's gated norm then write their projections' inputs in bf16. With the
// matmul weights loaded as bf16 the logits move by the rounding of those inputs only (near the
// reference still); with f32 weights nothing is asked for and nothing changes.
TEST(HybridModelTest, Bf16MatmulInputsFollowTheWeights) {
  int moved = 0, cases = 0;
  for (const Fixture& f : Fixtures()) {
    for (DType weights : {DType::kF32, DType::kBF16}) {
      LoadOptions options;
      options.matrix_dtype = weights;
      absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, options);
      ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
      const int64_t n = static_cast<int64_t>(f.tokens.size()), v = f.vocab;
      std::vector<float> last[2];
      for (bool bf16 : {false, true}) {
        absl::StatusOr<std::vector<float>> l = LastLogits(**m, f, bf16);
        ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
        last[bf16] = *std::move(l);
        EXPECT_LT(RelErr(last[bf16].data(), f.logits.data() + (n - 1) * v, v),
                  weights == DType::kBF16 ? 5e-2 : 1e-4)
            << f.name << " weights " << DTypeName(weights) << (bf16 ? ", bf16 inputs" : "");
      }
      if (weights == DType::kF32) {
        EXPECT_EQ(last[0], last[1]) << f.name << ": f32 weights take f32 inputs";
      } else {  // the inputs' rounding only: close to the f32 inputs' logits
        ++cases;
        moved += last[0] != last[1];
        const std::vector<double> f32_inputs(last[0].begin(), last[0].end());
        EXPECT_LT(RelErr(last[1].data(), f32_inputs.data(), v), 2e-2) << f.name;
      }
    }
  }
  EXPECT_EQ(moved, cases) << "with bf16 weights the bf16 inputs change every fixture's logits";
  EXPECT_GT(cases, 0);
}

// fp8 checkpoints on the CPU: their fp8 weights kept as stored (the default there) hold less
// memory than dequantized ones, and give the same logits bit for bit where the products are
// batch-invariant (the kept weights always take that kernel; dequantized f32 ones take OpenBLAS
// otherwise). Kept weights on CUDA are refused, naming the device.
TEST(HybridModelTest, Fp8WeightsKeptAsStoredGiveTheDequantizedLogits) {
  int fp8 = 0;
  for (const Fixture& f : Fixtures()) {
    if (f.name.find("fp8") == std::string::npos) continue;
    ++fp8;
    std::unique_ptr<Model> models[2];
    for (auto mode : {LoadOptions::Fp8Weights::kKeep, LoadOptions::Fp8Weights::kDequantize}) {
      LoadOptions options;
      options.fp8_weights = mode;
      absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, options);
      ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
      models[mode == LoadOptions::Fp8Weights::kKeep] = *std::move(m);
    }
    const Model &kept = *models[1], &dequantized = *models[0];
    EXPECT_TRUE(kept.fp8_kept()) << f.name;
    EXPECT_FALSE(dequantized.fp8_kept()) << f.name;
    EXPECT_EQ(kept.num_parameters(), dequantized.num_parameters()) << f.name;
    // Each kept fp8 value takes 1 byte of the dequantized 4 (plus its scales): the fixtures keep
    // their embeddings, lm_head and norms in f32, so at least 60 % goes.
    EXPECT_LT(5 * kept.weight_bytes(), 2 * dequantized.weight_bytes()) << f.name;
    // A prefill of all but the last three tokens (products over many rows), then three decode
    // steps (one row: the tiles dequantize as they load).
    const int64_t n = static_cast<int64_t>(f.tokens.size());
    std::vector<float> logits[2];
    for (int which = 0; which < 2; ++which) {
      const Model& m = which == 0 ? kept : dequantized;
      absl::StatusOr<ModelStates> states =
          ModelStates::Allocate(m.state_specs(), 1, Device::kCpu, true,
                                {KvBytesPerToken(m.state_specs()) * (n + 8), /*block_tokens=*/4});
      ASSERT_TRUE(states.ok()) << states.status();
      const std::vector<int32_t> prompt(f.tokens.begin(), f.tokens.end() - 3);
      absl::StatusOr<Tensor> l =
          Step(m, *states, prompt, {{0, n - 3, 0, 0}}, false, false, /*batch_invariant=*/true);
      ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
      logits[which].assign(l->data<float>(), l->data<float>() + f.vocab);
      for (int64_t at = n - 3; at < n; ++at) {
        l = Step(m, *states, {f.tokens[at]}, {{0, 1, at, 0}}, false, false, true);
        ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
        logits[which].insert(logits[which].end(), l->data<float>(), l->data<float>() + f.vocab);
      }
    }
    EXPECT_EQ(logits[0], logits[1]) << f.name;
  }
  EXPECT_EQ(fp8, 5) << "the five fp8 fixtures";
}

// --quantization fp8 (models/fp8.h QuantizeFp8): the fixtures' projections quantized on load in
// 128 × 128 blocks give the logits the reference computes with the same quantization (its own
// quantizer, make_hybrid_fixtures.py fp8_round_trip), in every mode; the weights take about a
// third of their f32 bytes and the logits move away from the unquantized ones.
TEST(HybridModelTest, QuantizedOnLoadMatchesTheReferencesQuantization) {
  int cases = 0;
  for (const Fixture& f : Fixtures()) {
    if (f.fp8q_logits.empty()) continue;
    ++cases;
    LoadOptions options;
    options.quantize_fp8 = true;
    absl::StatusOr<std::unique_ptr<Model>> q = Model::Load(f.dir, options);
    ASSERT_TRUE(q.ok()) << f.name << ": " << q.status();
    std::unique_ptr<Model> plain = LoadOrDie(f);
    EXPECT_TRUE((*q)->quantized_on_load() && (*q)->fp8_kept()) << f.name;
    EXPECT_LT(2 * (*q)->weight_bytes(), plain->weight_bytes()) << f.name;
    for (auto [mode, chunk] :
         {std::pair{RecurrenceMode::kRecurrent, 64}, {RecurrenceMode::kChunked, 16}}) {
      SequenceRunner runner(q->get());
      absl::StatusOr<Tensor> logits = runner.Feed(f.tokens, {mode, chunk, true});
      ASSERT_TRUE(logits.ok()) << f.name << ": " << logits.status();
      EXPECT_LT(RelErr(logits->data<float>(), f.fp8q_logits.data(), logits->numel()), 1e-4)
          << f.name << " mode=" << static_cast<int>(mode);
      EXPECT_GT(RelErr(logits->data<float>(), f.logits.data(), logits->numel()), 1e-3)
          << f.name << ": quantizing changed nothing";
    }
  }
  EXPECT_EQ(cases, 4) << "qwen35_text_f32, qwen35moe_text_fused_q8, qwen35moe_vlm_bf16_per_expert, "
                         "qwen3next_f32";
}

// QuantizeFp8 against the reference's quantizer (make_hybrid_fixtures.py fp8_quantize_oracle):
// the same bytes and scales for a matrix of 3 × 3 blocks with partial edges, rows of very
// different magnitudes, a block of zeros, values among e4m3's subnormals and exact ties.
TEST(HybridModelTest, QuantizeFp8MatchesTheReferenceQuantizer) {
  absl::StatusOr<WeightStore> store =
      WeightStore::Open(fs::path(LINFER_HYBRID_FIXTURES) / "fp8_quantize_oracle");
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Tensor> w = store->LoadHost("w", {300, 260});
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<Tensor> q = QuantizeFp8("w", *w, 128, 128);
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(
      fs::path(LINFER_HYBRID_FIXTURES) / "fp8_quantize_oracle" / "oracle.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<absl::string_view> want_q = (*file)->Data("q");
  absl::StatusOr<Tensor> want_s = store->LoadHost("s", {3, 3});
  ASSERT_TRUE(want_q.ok() && want_s.ok()) << want_q.status() << want_s.status();
  ASSERT_EQ(want_q->size(), size_t{300 * 260});
  int64_t differ = 0;
  for (int64_t i = 0; i < 300 * 260; ++i) {
    differ += q->data<uint8_t>()[i] != static_cast<uint8_t>((*want_q)[i]);
  }
  EXPECT_EQ(differ, 0) << "bytes differ from the reference's";
  ASSERT_EQ(q->view().scale_cols(), 3);
  for (int64_t r = 0; r < 300; ++r) {
    for (int64_t b = 0; b < 3; ++b) {
      ASSERT_EQ(q->view().scales()[r * 3 + b], want_s->data<float>()[r / 128 * 3 + b])
          << "row " << r << " block " << b;
    }
  }
}

// Input norms folded into the projections after them (kernels/gemm.h RmsNormLinear; on CUDA where
// the GEMV runs): Qwen3.5's GDN mixers take the residual stream and the block's norm. On the CPU
// the fold is the same two ops, so every fixture's logits are unchanged, bit for bit, with f32 and
// bf16 weights and inputs — what this checks is the plumbing (the norm's weight, its zero-centred
// shift, the rows it gets).
TEST(HybridModelTest, FoldedInputNormsChangeNothing) {
  int qwen = 0;
  for (const Fixture& f : Fixtures()) {
    qwen += f.name.starts_with("qwen35");
    for (DType weights : {DType::kF32, DType::kBF16}) {
      LoadOptions options;
      options.matrix_dtype = weights;
      absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, options);
      ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
      for (bool bf16 : {false, true}) {
        std::vector<float> logits[2];
        for (bool fold : {false, true}) {
          absl::StatusOr<std::vector<float>> l = LastLogits(**m, f, bf16, fold);
          ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
          logits[fold] = *std::move(l);
        }
        EXPECT_EQ(logits[0], logits[1])
            << f.name << " weights " << DTypeName(weights) << (bf16 ? ", bf16 inputs" : "");
      }
    }
  }
  EXPECT_GT(qwen, 0) << "no Qwen3.5 fixture: nothing folded";
}

TEST(HybridModelTest, RaggedBatchOverPagedKvEqualsReference) {
  for (const Fixture& f : Fixtures()) {
    std::unique_ptr<Model> m = LoadOrDie(f);
    ASSERT_NE(m, nullptr);
    const int64_t v = f.vocab, na = static_cast<int64_t>(f.tokens.size());
    // Budget of 20 blocks of 4 tokens: the whole fixture (18 blocks) + 1 + 1.
    absl::StatusOr<ModelStates> states =
        ModelStates::Allocate(m->state_specs(), 4, Device::kCpu, true,
                              {KvBytesPerToken(m->state_specs()) * 4 * 20, /*block_tokens=*/4});
    ASSERT_TRUE(states.ok()) << states.status();
    // Two steps: prefixes of 37, 1 and 3 tokens over slots 3, 0, 1; then the rest of the first
    // and one more token of each other.
    std::vector<int32_t> tokens(f.tokens.begin(), f.tokens.begin() + 37);
    tokens.push_back(f.tokens[0]);
    tokens.insert(tokens.end(), f.tokens.begin(), f.tokens.begin() + 3);
    absl::StatusOr<Tensor> l =
        Step(*m, *states, tokens, {{0, 37, 0, 3}, {37, 1, 0, 0}, {38, 3, 0, 1}});
    ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
    const int64_t last1[3] = {36, 0, 2};
    for (int s = 0; s < 3; ++s) {
      EXPECT_LT(RelErr(l->data<float>() + s * v, f.logits.data() + last1[s] * v, v), 1e-4)
          << f.name << " step 1 sequence " << s;
    }
    tokens.assign(f.tokens.begin() + 37, f.tokens.end());
    tokens.push_back(f.tokens[1]);
    tokens.push_back(f.tokens[3]);
    const int64_t rest = na - 37;
    l = Step(*m, *states, tokens, {{0, rest, 37, 3}, {rest, 1, 1, 0}, {rest + 1, 1, 3, 1}});
    ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
    const int64_t last2[3] = {na - 1, 1, 3};
    for (int s = 0; s < 3; ++s) {
      EXPECT_LT(RelErr(l->data<float>() + s * v, f.logits.data() + last2[s] * v, v), 1e-4)
          << f.name << " step 2 sequence " << s;
    }
  }
}

// Slot 0 runs a prefix, forks into slot 1 (KV blocks shared), then both continue differently
// (each write into a shared block copies it first): each matches a sequence run alone; a state
// copied out and back in continues bit-identically; the KV budget refuses cleanly.
TEST(HybridModelTest, ForkCopyOnWriteAndHostRoundTrip) {
  for (const Fixture& f : Fixtures()) {
    std::unique_ptr<Model> m = LoadOrDie(f);
    ASSERT_NE(m, nullptr);
    const int64_t v = f.vocab;
    const KvOptions kv{KvBytesPerToken(m->state_specs()) * 8 * 12, 8};
    absl::StatusOr<ModelStates> states =
        ModelStates::Allocate(m->state_specs(), 3, Device::kCpu, true, kv);
    ASSERT_TRUE(states.ok()) << states.status();
    Arena arena(Device::kCpu);
    const ExecContext ctx = CpuContext(&arena);
    const std::vector<int32_t> prefix(f.tokens.begin(), f.tokens.begin() + 20);
    ASSERT_TRUE(Step(*m, *states, prefix, {{0, 20, 0, 0}}).ok());
    const int64_t held = states->has_kv() ? states->kv().used_blocks() : 0;
    ASSERT_TRUE(states->Copy(ctx, 0, 1).ok());
    if (states->has_kv()) {
      EXPECT_EQ(states->kv().used_blocks(), held) << "a fork shares blocks";
    }
    // Different continuations: A = tokens[20, 30), B = tokens[40, 50).
    const std::vector<int32_t> a(f.tokens.begin() + 20, f.tokens.begin() + 30),
        b(f.tokens.begin() + 40, f.tokens.begin() + 50);
    std::vector<int32_t> both = a;
    both.insert(both.end(), b.begin(), b.end());
    absl::StatusOr<Tensor> l = Step(*m, *states, both, {{0, 10, 20, 0}, {10, 10, 20, 1}});
    ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
    EXPECT_LT(RelErr(l->data<float>(), f.logits.data() + 29 * v, v), 1e-4) << f.name << " A";
    // B alone: prefix ++ b in a fresh runner.
    std::vector<int32_t> alone = prefix;
    alone.insert(alone.end(), b.begin(), b.end());
    SequenceRunner runner(m.get());
    absl::StatusOr<Tensor> ref = runner.Feed(alone, {});
    ASSERT_TRUE(ref.ok());
    double worst = 0;
    for (int64_t i = 0; i < v; ++i) {
      worst = std::max(
          worst, static_cast<double>(std::abs(l->data<float>()[v + i] - ref->data<float>()[i])));
    }
    EXPECT_LT(worst, 1e-4) << f.name << " B after the fork";

    // Slot 0 out to the host and into slot 2; one more token in both: identical bits.
    HostState host;
    ASSERT_TRUE(states->CopyOut(ctx, 0, 30, &host).ok());
    EXPECT_EQ(host.kv_tokens, states->has_kv() ? 30 : 0);
    EXPECT_EQ(static_cast<int64_t>(host.kv_bytes.size()),
              host.kv_tokens * KvBytesPerToken(m->state_specs()));
    ASSERT_TRUE(states->CopyIn(ctx, host, 2).ok());
    const std::vector<int32_t> next = {f.tokens[30], f.tokens[30]};
    l = Step(*m, *states, next, {{0, 1, 30, 0}, {1, 1, 30, 2}});
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(std::memcmp(l->data<float>(), l->data<float>() + v, v * sizeof(float)), 0) << f.name;
    EXPECT_LT(RelErr(l->data<float>(), f.logits.data() + 30 * v, v), 1e-4) << f.name;

    // Releasing every slot returns every block.
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(states->Zero(ctx, s).ok());
    if (!states->has_kv()) continue;
    EXPECT_EQ(states->kv().used_blocks(), 0) << f.name;
    // The budget (12 blocks of 8) cannot hold 100 tokens: refused, nothing held.
    absl::Status st = states->ReserveKv(ctx, 0, 100, 0);
    EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
    EXPECT_EQ(states->kv().used_blocks(), 0);
    // A forward without reserved blocks is refused, not a wild write.
    absl::StatusOr<Tensor> out = Tensor::Empty(DType::kF32, {1, v});
    const std::vector<Segment> seg = {{0, 1, 0, 0}};
    st = m->Forward(ctx, {{f.tokens.data(), 1}, seg}, *states, out->view());
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  }
}

TEST(HybridModelTest, KvBytesMatchTheAttentionLayers) {
  for (const Fixture& f : Fixtures()) {
    std::unique_ptr<Model> m = LoadOrDie(f);
    ASSERT_NE(m, nullptr);
    int64_t expect = 0;
    for (const auto& [layer, a] : m->config().attention_layers) {
      if (a.window == 0) expect += 2 * a.num_kv_heads * a.head_dim * 4;
    }
    EXPECT_EQ(KvBytesPerToken(m->state_specs()), expect) << f.name;
    EXPECT_FALSE(m->config().attention_layers.empty()) << f.name;
  }
}

}  // namespace
}  // namespace linfer
