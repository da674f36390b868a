// Every reference fixture (fla families, Qwen3.5/fla hybrids, RWKV-7 / Mamba2 / Based / ReBased)
// on every device, against the independent float64 reference logits: the CPU with f32 weights
// (1e-4, as models_test) and with bf16 / f16 weights, CUDA with the server's bf16 weights and with
// f32 weights (‖a − b‖₂ / ‖b‖₂ within the band the weights' rounding allows, WeightBand, or the
// device's bf16 band of device_testing.h). Also prefill + decode steps on the device, bf16
// recurrent states (CUDA only; refused elsewhere with a message naming the option), and the CPU's
// batch invariance with every weight dtype. The CUDA instances are compiled in everywhere and
// skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/host_memory.h"
#include "models/model.h"
#include "models/runner.h"
#include "nlohmann/json.hpp"
#include "tests/testing/device_testing.h"
#include "tests/testing/fixture_paths.h"

namespace linfer {
namespace {

namespace fs = std::filesystem;
using testing_util::DeviceCase;

struct Fixture {
  std::string name;  // set/case, e.g. "fla/gdn_default"
  fs::path dir;
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [T, V], the float64 reference rounded to float
  int64_t vocab = 0;
};

std::vector<Fixture> LoadSet(const std::string& set, const fs::path& root) {
  std::vector<Fixture> out;
  std::ifstream list(root / "cases.txt");
  EXPECT_TRUE(list.good()) << root / "cases.txt";
  std::string name;
  while (std::getline(list, name)) {
    if (name.empty()) continue;
    Fixture f{set + "/" + name, root / name, {}, {}, 0};
    std::ifstream ej(f.dir / "expected.json");
    const nlohmann::json j = nlohmann::json::parse(ej);
    f.tokens = j["tokens"].get<std::vector<int32_t>>();
    f.vocab = j["vocab_size"].get<int64_t>();
    std::vector<double> ref(f.tokens.size() * static_cast<size_t>(f.vocab));
    std::ifstream lf(f.dir / j["logits_file"].get<std::string>(), std::ios::binary);
    lf.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 8));
    EXPECT_TRUE(lf.good()) << f.name;
    f.logits.assign(ref.begin(), ref.end());
    out.push_back(std::move(f));
  }
  return out;
}

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> all = [] {
    std::vector<Fixture> v;
    for (const auto& [set, root] : {std::pair<std::string, const char*>{"fla", LINFER_FLA_FIXTURES},
                                    {"hybrid", LINFER_HYBRID_FIXTURES},
                                    {"families", LINFER_FAMILY_FIXTURES}}) {
      for (Fixture& f : LoadSet(set, testing_util::FixtureSetDir(root))) v.push_back(std::move(f));
    }
    return v;
  }();
  return all;
}

// The bound on ‖a − b‖₂ / ‖b‖₂ that rounding the matmul weights adds on these random fixtures,
// whose logits amplify weight errors: with bf16 weights (8-bit mantissa) the worst measured is
// 5.1e-2 (fla/deltanet_default; ten fixtures exceed 1e-2), with f16 (11-bit) all are within 1e-2.
// The exactness of 16-bit weights is tested at the kernel (kernels_test InvariantGemm*: the bits of
// the f32 product over the widened weights); this band catches a misread weight.
// CUDA rounds the GEMMs' activations to bf16 too: emulated on the CPU (Linear with x rounded to
// bf16), every fixture stays within 8e-2 but fla/linear_attn_normfm, at 0.16 — its identity
// feature map's normaliser divides by q·Σk, which random weights bring near 0 — so that fixture
// gets 0.25 there.
double WeightBand(DType w, Device device = Device::kCpu, const std::string& fixture = "") {
  if (w == DType::kBF16 && device == Device::kCuda && fixture == "fla/linear_attn_normfm") {
    return 0.25;
  }
  return w == DType::kBF16 ? 8e-2 : w == DType::kF16 ? 1e-2 : 0.0;
}

std::vector<float> AsVector(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Logits of a chunked prefill of the first n tokens (the last row), then one token per step (the
// decode path) to the end: [t − n + 1, V], to compare with the reference's rows n − 1 … t − 1.
std::vector<float> PrefillThenDecode(Model* model, const std::vector<int32_t>& tokens, int64_t n) {
  SequenceRunner runner(model);
  absl::StatusOr<Tensor> first =
      runner.Feed({tokens.data(), static_cast<size_t>(n)}, {RecurrenceMode::kChunked, 64, false});
  EXPECT_TRUE(first.ok()) << first.status();
  if (!first.ok()) return {};
  std::vector<float> got = AsVector(*first);
  for (size_t i = static_cast<size_t>(n); i < tokens.size(); ++i) {
    absl::StatusOr<Tensor> l = runner.Feed({&tokens[i], 1}, {});
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok()) return {};
    const std::vector<float> row = AsVector(*l);
    got.insert(got.end(), row.begin(), row.end());
  }
  EXPECT_EQ(runner.position(), static_cast<int64_t>(tokens.size()));
  return got;
}

class ModelOnDevice : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
  }
  Device device() const { return GetParam().device; }
  // The bound on ‖a − b‖₂ / ‖b‖₂ against the reference: f32 on the CPU; bf16 operands on CUDA.
  double rel() const { return device() == Device::kCuda ? GetParam().bf16_rel : 1e-4; }
};

TEST_P(ModelOnDevice, FixturesExist) { EXPECT_GE(Fixtures().size(), 90u); }

TEST_P(ModelOnDevice, LogitsMatchTheReferenceOnEveryFixture) {
  const std::vector<DType> weights =
      device() == Device::kCuda ? std::vector<DType>{DType::kBF16, DType::kF32}
                                : std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16};
  for (const Fixture& f : Fixtures()) {
    for (DType w : weights) {
      absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, {device(), w});
      ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
      EXPECT_EQ((*m)->device(), device());
      for (RecurrenceMode mode : {RecurrenceMode::kRecurrent, RecurrenceMode::kChunked}) {
        SequenceRunner runner(m->get());
        absl::StatusOr<Tensor> logits = runner.Feed(f.tokens, {mode, 64, true});
        ASSERT_TRUE(logits.ok()) << f.name << ": " << logits.status();
        // CUDA's chunked form takes bf16 tensor-core operands: on an H200 (2026-11-27) the
        // delta-rule fixtures whose keys are not L2-normalised (fla/deltanet_elu,
        // deltanet_noconv_elu, deltanet_negeig) reached 1.07e-2 with f32 weights — the UT
        // transform's triangular inverse amplifies the operands' rounding — so that form gets
        // twice the band.
        const double path = device() == Device::kCuda && mode == RecurrenceMode::kChunked ? 2 : 1;
        const double bound = std::max(path * rel(), WeightBand(w, device(), f.name));
        EXPECT_TRUE(testing_util::RelNear(AsVector(*logits), f.logits, bound))
            << f.name << " weights " << DTypeName(w) << " mode " << static_cast<int>(mode);
      }
    }
  }
}

// A 65-token chunked prefill, then one token per step (the decode path) to the end.
TEST_P(ModelOnDevice, PrefillThenDecodeStepsMatchTheReference) {
  for (const Fixture& f : Fixtures()) {
    const DType w = device() == Device::kCuda ? DType::kBF16 : DType::kF32;
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, {device(), w});
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    constexpr int64_t n = 65;
    SCOPED_TRACE(f.name);
    const std::vector<float> got = PrefillThenDecode(m->get(), f.tokens, n);
    const std::vector<float> want(f.logits.begin() + (n - 1) * f.vocab, f.logits.end());
    EXPECT_TRUE(testing_util::RelNear(got, want, std::max(rel(), WeightBand(w, device(), f.name))))
        << f.name;
  }
}

// bf16 recurrent states (f32 arithmetic, rounded once per write): CUDA only, for the families on
// the shared recurrence; the slot halves and the logits stay in a (looser) bf16 band.
TEST_P(ModelOnDevice, Bf16StatesOnCudaOnly) {
  for (const char* name : {"fla/gdn_default", "fla/gla_default", "hybrid/qwen35_text_f32"}) {
    const Fixture* f = nullptr;
    for (const Fixture& x : Fixtures()) {
      if (x.name == name) f = &x;
    }
    ASSERT_NE(f, nullptr) << name;
    LoadOptions load{device(), DType::kF32, DType::kBF16};
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f->dir, load);
    if (device() != Device::kCuda) {
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
      EXPECT_NE(m.status().message().find("state dtype bf16"), std::string::npos) << m.status();
      continue;
    }
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    absl::StatusOr<std::unique_ptr<Model>> f32 = Model::Load(f->dir, {device()});
    ASSERT_TRUE(f32.ok()) << f32.status();
    EXPECT_LT((*m)->state_bytes(), (*f32)->state_bytes()) << name;
    SequenceRunner runner(m->get());
    absl::StatusOr<Tensor> logits = runner.Feed(f->tokens, {RecurrenceMode::kAuto, 64, true});
    ASSERT_TRUE(logits.ok()) << name << ": " << logits.status();
    EXPECT_TRUE(testing_util::RelNear(AsVector(*logits), f->logits, 2 * rel())) << name;
  }
  const fs::path rwkv =
      fs::path(testing_util::FixtureSetDir(LINFER_FAMILY_FIXTURES)) / "rwkv7_default";
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Load(rwkv, {Device::kCuda, DType::kF32, DType::kBF16});
  EXPECT_FALSE(m.ok());
}

// A snapshot (ModelStates::Snapshot, the prefix cache's) holds the slot as it was when taken,
// though the slot is zeroed and rewritten right after with nothing waited for in between — on CUDA
// with LINFER_CUDA_ASYNC_SNAPSHOTS=1 its copy is then still in flight (the path is checked to be
// taken), and loading it into another slot waits for it. Both ways, a fla GDN and a hybrid.
TEST_P(ModelOnDevice, ASnapshotHoldsTheSlotAsItWasWhenTaken) {
  // Pinned host states, as the engine allocates them on CUDA: a copy into pageable memory would
  // finish before the call returns, and the slot's rewrite below would never meet a copy in
  // flight (process-wide, as in linfer serve).
  if (device() == Device::kCuda) UsePinnedHostStates(Device::kCuda);
  for (const char* name : {"fla/gdn_default", "hybrid/qwen35_text_f32"}) {
    SCOPED_TRACE(name);
    const Fixture* f = nullptr;
    for (const Fixture& x : Fixtures()) {
      if (x.name == name) f = &x;
    }
    ASSERT_NE(f, nullptr);
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f->dir, {device()});
    ASSERT_TRUE(m.ok()) << m.status();
    for (const char* async : {"0", "1"}) {
      SCOPED_TRACE(async);
      setenv("LINFER_CUDA_ASYNC_SNAPSHOTS", async, 1);  // read when the states are allocated
      absl::StatusOr<ModelStates> states =
          ModelStates::Allocate((*m)->state_specs(), 3, device(), true, KvOptions{1 << 20, 16});
      unsetenv("LINFER_CUDA_ASYNC_SNAPSHOTS");
      ASSERT_TRUE(states.ok()) << states.status();
      testing_util::TestContext tc(device());
      auto random_state = [&](uint32_t seed) {
        HostState h;
        const std::vector<float> v =
            testing_util::RandomFloats(static_cast<size_t>(states->slot_bytes() / 4), seed);
        h.bytes.resize(static_cast<size_t>(states->slot_bytes()));
        std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
        h.position = 5;
        return h;
      };
      ASSERT_TRUE(states->CopyIn(tc.ctx, random_state(81), 0).ok());
      HostState before, snap, after;
      ASSERT_TRUE(states->CopyOut(tc.ctx, 0, -1, &before).ok());
      ASSERT_TRUE(states->Snapshot(tc.ctx, 0, 0, &snap).ok());
      EXPECT_EQ(snap.pending != nullptr, device() == Device::kCuda && std::string(async) == "1");
      ASSERT_TRUE(states->Zero(tc.ctx, 0).ok());
      ASSERT_TRUE(states->CopyIn(tc.ctx, random_state(82), 0).ok());
      ASSERT_TRUE(states->CopyIn(tc.ctx, snap, 2).ok());
      ASSERT_TRUE(states->CopyOut(tc.ctx, 2, -1, &after).ok());
      ASSERT_TRUE(snap.Settle().ok());
      EXPECT_TRUE(snap.bytes == before.bytes);
      EXPECT_TRUE(after.bytes == before.bytes);
    }
  }
}

// fp8 weights kept as stored (--fp8_weights keep) on the device: every fp8 fixture against its
// float64 reference (which dequantizes them) whole in both modes, and as a chunked prefill then
// decode steps (on CUDA the prefill's products widen the weights to bf16; the decode steps' take
// the fp8 GEMV where the scale blocks allow it: 16 × 16 blocks, channel and tensor scales —
// blocks of 24 or 40 columns narrower than a row widen there too); and quantized on load
// (--quantization fp8, 128 × 128 blocks: the GEMV) against the CPU's quantized model.
TEST_P(ModelOnDevice, Fp8WeightsKeptAndQuantizedOnTheDevice) {
  const DType w = device() == Device::kCuda ? DType::kBF16 : DType::kF32;
  int kept = 0;
  for (const Fixture& f : Fixtures()) {
    LoadOptions keep{device(), w};
    keep.fp8_weights = LoadOptions::Fp8Weights::kKeep;
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, keep);
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    if (!(*m)->fp8_kept()) continue;
    ++kept;
    const double band = std::max(rel(), WeightBand(w, device(), f.name));
    for (RecurrenceMode mode : {RecurrenceMode::kRecurrent, RecurrenceMode::kChunked}) {
      SequenceRunner runner(m->get());
      absl::StatusOr<Tensor> logits = runner.Feed(f.tokens, {mode, 64, true});
      ASSERT_TRUE(logits.ok()) << f.name << ": " << logits.status();
      const double path = device() == Device::kCuda && mode == RecurrenceMode::kChunked ? 2 : 1;
      EXPECT_TRUE(testing_util::RelNear(AsVector(*logits), f.logits, path * band))
          << f.name << " mode " << static_cast<int>(mode);
    }
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(f.tokens.size()) - 1, 40);
    SCOPED_TRACE(f.name);
    const std::vector<float> got = PrefillThenDecode(m->get(), f.tokens, n);
    const std::vector<float> want(f.logits.begin() + (n - 1) * f.vocab, f.logits.end());
    EXPECT_TRUE(testing_util::RelNear(got, want, band)) << f.name << " prefill + decode";
  }
  EXPECT_GE(kept, 5) << "the fp8 fixtures";
  for (const char* name : {"fla/gdn_default", "hybrid/qwen35_text_f32", "hybrid/qwen3next_f32"}) {
    SCOPED_TRACE(name);
    const Fixture* f = nullptr;
    for (const Fixture& x : Fixtures()) {
      if (x.name == name) f = &x;
    }
    ASSERT_NE(f, nullptr);
    LoadOptions quantize{device(), w}, on_cpu{Device::kCpu, DType::kF32};
    quantize.quantize_fp8 = on_cpu.quantize_fp8 = true;
    absl::StatusOr<std::unique_ptr<Model>> q = Model::Load(f->dir, quantize);
    absl::StatusOr<std::unique_ptr<Model>> c = Model::Load(f->dir, on_cpu);
    ASSERT_TRUE(q.ok() && c.ok()) << q.status() << " " << c.status();
    EXPECT_TRUE((*q)->quantized_on_load());
    SequenceRunner device_runner(q->get()), cpu_runner(c->get());
    absl::StatusOr<Tensor> got = device_runner.Feed(f->tokens, {RecurrenceMode::kAuto, 64, true});
    absl::StatusOr<Tensor> want = cpu_runner.Feed(f->tokens, {RecurrenceMode::kAuto, 64, true});
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << " " << want.status();
    EXPECT_TRUE(testing_util::RelNear(AsVector(*got), AsVector(*want),
                                      std::max(2 * rel(), WeightBand(w, device(), name))));
  }
}

// An fp8 KV cache (--kv_dtype fp8) on the device: every hybrid fixture, whole in both modes,
// against the CPU's fp8-cache run (the same e4m3 rounding of every key and value; the f32 reference
// sits further away, by the cache's 3-bit mantissa).
TEST_P(ModelOnDevice, Fp8KvCacheMatchesTheCpusFp8Cache) {
  const DType w = device() == Device::kCuda ? DType::kBF16 : DType::kF32;
  int hybrids = 0;
  for (const Fixture& f : Fixtures()) {
    if (f.name.rfind("hybrid/", 0) != 0) continue;
    ++hybrids;
    LoadOptions on_device{device(), w}, on_cpu{Device::kCpu, DType::kF32};
    on_device.kv_dtype = on_cpu.kv_dtype = DType::kF8E4M3;
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, on_device);
    absl::StatusOr<std::unique_ptr<Model>> c = Model::Load(f.dir, on_cpu);
    ASSERT_TRUE(m.ok() && c.ok()) << f.name << ": " << m.status() << " " << c.status();
    SequenceRunner cpu_runner(c->get());
    absl::StatusOr<Tensor> want = cpu_runner.Feed(f.tokens, {RecurrenceMode::kAuto, 64, true});
    ASSERT_TRUE(want.ok()) << f.name << ": " << want.status();
    for (RecurrenceMode mode : {RecurrenceMode::kRecurrent, RecurrenceMode::kChunked}) {
      SequenceRunner runner(m->get());
      absl::StatusOr<Tensor> got = runner.Feed(f.tokens, {mode, 64, true});
      ASSERT_TRUE(got.ok()) << f.name << ": " << got.status();
      const double path = device() == Device::kCuda && mode == RecurrenceMode::kChunked ? 2 : 1;
      EXPECT_TRUE(testing_util::RelNear(AsVector(*got), AsVector(*want),
                                        std::max(path * rel(), WeightBand(w, device(), f.name))))
          << f.name << " mode " << static_cast<int>(mode);
    }
  }
  EXPECT_GE(hybrids, 5);
}

// f16 weights are a CPU option: CUDA refuses them by name.
TEST_P(ModelOnDevice, F16WeightsOnTheCpuOnly) {
  const Fixture& f = Fixtures().front();
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, {device(), DType::kF16});
  if (device() == Device::kCpu) {
    EXPECT_TRUE(m.ok()) << m.status();
    return;
  }
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_NE(m.status().message().find("weight dtype f16"), std::string::npos) << m.status();
}

// Batch-invariant mode (CPU): the sequence fed whole, or as 37 + 27 tokens and then one per step,
// gives the same bits at every position — what makes a resumed session or prefix-cache hit
// bit-identical to computing the conversation cold. With f32 weights and with the 16-bit ones
// (whose whole pass widens weight blocks into a buffer while single steps widen as they load).
class BatchInvariantTest : public ::testing::TestWithParam<DType> {};

TEST_P(BatchInvariantTest, AnySplitGivesTheSameBitsOnEveryFixture) {
  for (const Fixture& f : Fixtures()) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir, {Device::kCpu, GetParam()});
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    const int64_t t = static_cast<int64_t>(f.tokens.size()), v = f.vocab;
    SequenceRunner whole(m->get(), /*batch_invariant=*/true);
    absl::StatusOr<Tensor> want = whole.Feed(f.tokens, {RecurrenceMode::kAuto, 64, true});
    ASSERT_TRUE(want.ok()) << f.name << ": " << want.status();
    EXPECT_TRUE(
        testing_util::RelNear(AsVector(*want), f.logits, std::max(1e-4, WeightBand(GetParam()))))
        << f.name;
    SequenceRunner pieces(m->get(), /*batch_invariant=*/true);
    int64_t at = 0;
    while (at < t) {
      const int64_t n = at == 0    ? std::min<int64_t>(37, t)
                        : at == 37 ? std::min<int64_t>(27, t - at)
                                   : 1;
      absl::StatusOr<Tensor> l =
          pieces.Feed({&f.tokens[at], static_cast<size_t>(n)}, {RecurrenceMode::kAuto, 64, true});
      ASSERT_TRUE(l.ok()) << f.name << ": " << l.status();
      EXPECT_EQ(std::memcmp(l->data<float>(), want->data<float>() + at * v, n * v * sizeof(float)),
                0)
          << f.name << ": rows " << at << ".." << at + n << " differ from the whole pass";
      at += n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, BatchInvariantTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(DTypeName(p.param));
                         });

INSTANTIATE_TEST_SUITE_P(Devices, ModelOnDevice,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
