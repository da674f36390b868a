// The layer-level recurrence on every device at model-like shapes, against the CPU twin: decode
// batches of 1..256 sequences in non-contiguous slots, grouped (GVA) and odd head counts, value
// dims that are not a multiple of the kernels' tiles, chunked = token by token on the device,
// prefill and decode segments in one call, and bf16 states (CUDA only). On CUDA the token-by-token
// kernel is f32 and held to f32 tolerances; the tensor-core chunked form takes bf16 operands and
// is held to DeviceCase::bf16_rel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/recurrence.h"
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::DeviceCase;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::RelNear;
using testing_util::SegmentTable;
using testing_util::ToDevice;
using testing_util::ToHostFloats;

struct Heads {
  int hq, hk, h, dk, dv;  // q/k heads, output (= value, gate, β) heads, dims
};

struct Variant {
  const char* name;
  DecayKind decay;
  bool delta, fixed;  // fixed: scalar decay from head_log_decay (RetNet)
};

constexpr Variant kVariants[] = {
    {"linear", DecayKind::kNone, false, false},  {"delta", DecayKind::kNone, true, false},
    {"gdn", DecayKind::kScalar, true, false},    {"scalar", DecayKind::kScalar, false, false},
    {"retnet", DecayKind::kScalar, false, true}, {"gla", DecayKind::kVector, false, false},
};

// Host values of one layer call's inputs (seeded), sized for `t` tokens and `slots` slots.
struct Inputs {
  std::vector<float> q, k, v, g, beta, fixed, state;
  Inputs(const Heads& s, const Variant& var, int64_t t, int64_t slots, uint32_t seed) {
    q = RandomFloats(t * s.hq * s.dk, seed + 1);
    k = RandomFloats(t * s.hk * s.dk, seed + 2);
    for (int64_t r = 0; r < t * s.hk; ++r) {  // unit keys: the delta rule stays contractive
      float n = 0;
      for (int j = 0; j < s.dk; ++j) n += k[r * s.dk + j] * k[r * s.dk + j];
      for (int j = 0; j < s.dk; ++j) k[r * s.dk + j] /= std::sqrt(n);
    }
    v = RandomFloats(t * s.h * s.dv, seed + 3);
    g = RandomFloats(t * s.h * (var.decay == DecayKind::kVector ? s.dk : 1), seed + 4);
    for (float& x : g) x = -0.1f * std::abs(x);
    beta = RandomFloats(t * s.h, seed + 5);
    for (float& x : beta) x = 1 / (1 + std::exp(-x));
    fixed = RandomFloats(s.h, seed + 6);
    for (float& x : fixed) x = -0.05f * std::abs(x) - 0.01f;
    state = RandomFloats(slots * s.h * s.dk * s.dv, seed + 7, 0.05f);
  }
};

struct Output {
  std::vector<float> o, state;
};

Output RunLayer(const ExecContext& ctx, const Heads& s, const Variant& var, const Inputs& in,
                const std::vector<Segment>& segs, int64_t slots, RecurrenceMode mode,
                DType state_dtype = DType::kF32, absl::Status* status = nullptr) {
  const int64_t t = segs.back().row_begin + segs.back().num_tokens;
  Tensor q = ToDevice(ctx, in.q, {t, int64_t{s.hq} * s.dk});
  Tensor k = ToDevice(ctx, in.k, {t, int64_t{s.hk} * s.dk});
  Tensor v = ToDevice(ctx, in.v, {t, int64_t{s.h} * s.dv});
  Tensor g = ToDevice(ctx, in.g, {t, static_cast<int64_t>(in.g.size()) / t});
  Tensor beta = ToDevice(ctx, in.beta, {t, s.h});
  Tensor fixed = ToDevice(ctx, in.fixed, {s.h});
  const Shape state_shape{slots, s.h, s.dk, s.dv};
  Tensor state = state_dtype == DType::kBF16
                     ? ToDevice(ctx, testing_util::Bf16Bits(in.state), DType::kBF16, state_shape)
                     : ToDevice(ctx, in.state, state_shape);
  Tensor o = Poisoned(ctx, {t, int64_t{s.h} * s.dv});
  Tensor table = SegmentTable(ctx, segs);
  RecurrenceInputs ri;
  ri.q = q.view();
  ri.k = k.view();
  ri.v = v.view();
  if (var.fixed) {
    ri.head_log_decay = fixed.view();
  } else if (var.decay != DecayKind::kNone) {
    ri.g = g.view();
  }
  if (var.delta) ri.beta = beta.view();
  const RecurrenceSpec spec{s.dk, s.dv, var.decay, var.delta, false, 1.0f / std::sqrt(float(s.dk))};
  const absl::Status st =
      Recurrence(ctx, spec, ri, {segs, table.view()}, state.view(), {}, {mode, 64}, o.view());
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st;
  }
  return {testing_util::ToHost(ctx, o.view()), ToHostFloats(ctx, state.view())};
}

// `lens` packed in order, segment i in slot slots_of(i).
std::vector<Segment> MakeSegments(const std::vector<int64_t>& lens, int64_t slots) {
  std::vector<Segment> segs;
  int64_t row = 0, stride = 7;
  while (std::gcd(stride, slots) != 1) ++stride;  // coprime with `slots`: distinct, scattered
  for (size_t i = 0; i < lens.size(); ++i) {
    segs.push_back({row, lens[i], 5 * int64_t(i), (stride * int64_t(i) + 3) % slots});
    row += lens[i];
  }
  return segs;
}

class DeviceRecurrenceShapesTest : public testing_util::DeviceOpsTest {
 protected:
  bool tensor_cores() const { return GetParam().bf16_rel > 0; }
};

TEST_P(DeviceRecurrenceShapesTest, DecodeBatchesMatchTheCpuTwin) {
  const DeviceCase& c = GetParam();
  struct Case {
    Heads s;
    std::vector<int> batches;
  };
  const Case cases[] = {
      {{2, 2, 2, 128, 128}, {1, 16, 64, 256}},  // Qwen3.5-0.8B heads (fewer of them)
      {{2, 2, 6, 64, 96}, {1, 7, 33}},          // GVA: 3 value heads per q/k head
      {{3, 3, 3, 32, 40}, {5}},                 // odd heads, dv not a multiple of 32
      {{1, 1, 1, 256, 512}, {1, 16}},           // fla 1.3B GDN head
      {{1, 1, 2, 16, 12}, {3}},                 // tiny dims (masked rows and columns)
      // LINFER_CUDA_STEP=wide's 128- and 64-column tiles, partly filled (rows and columns)
      {{2, 2, 2, 100, 200}, {1, 5}},
      {{1, 1, 2, 200, 36}, {1, 3}},
      // dv not a multiple of 4 with dk past 32: the wide tiles' scalar loads (no cp.async)
      {{1, 1, 1, 100, 50}, {1, 4}},
  };
  for (const Case& cs : cases) {
    for (int batch : cs.batches) {
      const int64_t slots = batch + 3;
      const std::vector<Segment> segs = MakeSegments(std::vector<int64_t>(batch, 1), slots);
      for (const Variant& var : kVariants) {
        const Inputs in(cs.s, var, batch, slots, 100 + batch);
        const Output d = RunLayer(dev(), cs.s, var, in, segs, slots, RecurrenceMode::kAuto);
        const Output h = RunLayer(cpu(), cs.s, var, in, segs, slots, RecurrenceMode::kAuto);
        const std::string what = absl::StrCat(var.name, " dk ", cs.s.dk, " dv ", cs.s.dv, " heads ",
                                              cs.s.h, " batch ", batch);
        EXPECT_TRUE(AllNear(d.o, h.o, 10 * c.atol, 10 * c.rtol)) << what;
        EXPECT_TRUE(AllNear(d.state, h.state, 10 * c.atol, 10 * c.rtol)) << what;
      }
    }
  }
}

// Far more work items (32-column tiles × heads × segments) than resident blocks: LINFER_CUDA_STEP=
// pipe's persistent blocks then walk several items each, copying the next one's state while they
// compute the current one (tests/gpu/run_on_gpu.sh runs this under racecheck with it); the other
// variants see a large grid. Some segments are 2 tokens long.
TEST_P(DeviceRecurrenceShapesTest, ManyWorkItemsPerBlockMatchTheCpuTwin) {
  const DeviceCase& c = GetParam();
  const Heads s{2, 2, 2, 128, 128};  // 4 tiles × 2 heads × 700 segments = 5,600 items
  std::vector<int64_t> lens(700, 1);
  for (size_t i = 0; i < lens.size(); i += 7) lens[i] = 2;
  const int64_t slots = 701;
  const std::vector<Segment> segs = MakeSegments(lens, slots);
  const Variant& gdn = kVariants[2];
  const Inputs in(s, gdn, segs.back().row_begin + segs.back().num_tokens, slots, 17);
  const Output d = RunLayer(dev(), s, gdn, in, segs, slots, RecurrenceMode::kAuto);
  const Output h = RunLayer(cpu(), s, gdn, in, segs, slots, RecurrenceMode::kAuto);
  EXPECT_TRUE(AllNear(d.o, h.o, 10 * c.atol, 10 * c.rtol));
  EXPECT_TRUE(AllNear(d.state, h.state, 10 * c.atol, 10 * c.rtol));
}

TEST_P(DeviceRecurrenceShapesTest, ChunkedEqualsTokenByTokenAndTheCpuTwin) {
  const Heads shapes[] = {
      {1, 1, 2, 128, 128}, {1, 1, 3, 64, 64}, {1, 1, 1, 256, 512}, {2, 2, 2, 16, 12}};
  const std::vector<int64_t> lens = {1, 63, 64, 65, 130, 300};
  const int64_t slots = 11;
  const std::vector<Segment> segs = MakeSegments(lens, slots);
  for (const Heads& s : shapes) {
    for (const Variant& var : kVariants) {
      const Inputs in(s, var, segs.back().row_begin + segs.back().num_tokens, slots, 7);
      const std::string what = absl::StrCat(var.name, " dk ", s.dk, " dv ", s.dv);
      const Output chunked = RunLayer(dev(), s, var, in, segs, slots, RecurrenceMode::kChunked);
      const Output stepped = RunLayer(dev(), s, var, in, segs, slots, RecurrenceMode::kRecurrent);
      const Output cpu_ref = RunLayer(cpu(), s, var, in, segs, slots, RecurrenceMode::kRecurrent);
      if (!tensor_cores()) {
        EXPECT_TRUE(AllNear(chunked.o, stepped.o, 2e-4, 2e-4)) << what;
        EXPECT_TRUE(AllNear(chunked.state, stepped.state, 2e-4, 2e-4)) << what;
        continue;
      }
      const double rel = GetParam().bf16_rel;
      EXPECT_TRUE(AllNear(stepped.o, cpu_ref.o, 1e-3, 1e-3)) << what;  // f32, 300-token chains
      EXPECT_TRUE(AllNear(stepped.state, cpu_ref.state, 1e-3, 1e-3)) << what;
      EXPECT_TRUE(RelNear(chunked.o, stepped.o, rel)) << what;
      EXPECT_TRUE(RelNear(chunked.state, stepped.state, rel)) << what;
    }
  }
}

TEST_P(DeviceRecurrenceShapesTest, PrefillAndDecodeSegmentsInOneCall) {
  const Heads s{2, 2, 4, 128, 128};
  const std::vector<int64_t> lens = {1, 1, 100, 1, 64, 1};
  const int64_t slots = 9;
  const std::vector<Segment> segs = MakeSegments(lens, slots);
  const Variant& gdn = kVariants[2];
  const Inputs in(s, gdn, 168, slots, 31);
  const Output d = RunLayer(dev(), s, gdn, in, segs, slots, RecurrenceMode::kAuto);
  const Output h = RunLayer(cpu(), s, gdn, in, segs, slots, RecurrenceMode::kAuto);
  const double rel = tensor_cores() ? GetParam().bf16_rel : 1e-5;
  EXPECT_TRUE(RelNear(d.o, h.o, rel));
  EXPECT_TRUE(RelNear(d.state, h.state, rel));
  // The one-token segments take the f32 step kernel even in a call with prefill segments.
  const int64_t width = int64_t{s.h} * s.dv;
  for (const Segment& seg : segs) {
    if (seg.num_tokens != 1) continue;
    const auto row = [&](const std::vector<float>& o) {
      return std::vector<float>(o.begin() + seg.row_begin * width,
                                o.begin() + (seg.row_begin + 1) * width);
    };
    EXPECT_TRUE(AllNear(row(d.o), row(h.o), 10 * GetParam().atol, 10 * GetParam().rtol))
        << "row " << seg.row_begin;
  }
}

// CUDA's grids hold at most 65535 segments: a call with more is refused before any kernel runs —
// neither the one-token segments (step kernel) nor the prefill segment (chunked path) may have
// advanced their states.
TEST_P(DeviceRecurrenceShapesTest, TooManySegmentsAreRefusedBeforeAnyStateMoves) {
  if (GetParam().device != Device::kCuda) GTEST_SKIP() << "CUDA only (the CPU has no such limit)";
  const Heads s{1, 1, 1, 16, 16};
  std::vector<int64_t> lens(65536, 1);
  lens.push_back(100);
  const int64_t slots = static_cast<int64_t>(lens.size());
  const std::vector<Segment> segs = MakeSegments(lens, slots);
  const Variant& gdn = kVariants[2];
  const Inputs in(s, gdn, segs.back().row_begin + segs.back().num_tokens, slots, 5);
  absl::Status st;
  const Output d =
      RunLayer(dev(), s, gdn, in, segs, slots, RecurrenceMode::kAuto, DType::kF32, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("65537 segments"), std::string::npos) << st;
  EXPECT_TRUE(d.state == in.state) << "a refused call changed states";
}

TEST_P(DeviceRecurrenceShapesTest, Bf16StateIsComputedInF32AndRoundedOnce) {
  const Heads s{2, 2, 4, 128, 128};
  const int64_t slots = 6;
  if (!tensor_cores()) {  // the CPU twin keeps f32 states only
    const Variant& gdn = kVariants[2];
    const Inputs in(s, gdn, 2, slots, 3);
    Tensor state =
        ToDevice(cpu(), testing_util::Bf16Bits(in.state), DType::kBF16, {slots, s.h, s.dk, s.dv});
    Tensor q = Poisoned(cpu(), {2, 256}), v = Poisoned(cpu(), {2, 512}),
           o = Poisoned(cpu(), {2, 512});
    const std::vector<Segment> segs = MakeSegments({2}, slots);
    RecurrenceInputs ri;
    ri.q = ri.k = q.view();
    ri.v = v.view();
    EXPECT_FALSE(
        Recurrence(cpu(), {128, 128}, ri, HostSegments(segs), state.view(), {}, {}, o.view()).ok());
    return;
  }
  // The second shape: partly filled tiles (LINFER_CUDA_STEP=wide's 64-column ones among them).
  for (const Heads& shape : {s, Heads{1, 1, 2, 200, 36}}) {
    for (const Variant& var : kVariants) {
      for (const std::vector<int64_t>& lens :
           {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{1, 80, 3}}) {
        const std::vector<Segment> segs = MakeSegments(lens, slots);
        Inputs in(shape, var, segs.back().row_begin + segs.back().num_tokens, slots, 11);
        in.state = testing_util::RoundToBf16(in.state);  // what the bf16 state holds
        const Output d =
            RunLayer(dev(), shape, var, in, segs, slots, RecurrenceMode::kAuto, DType::kBF16);
        const Output h = RunLayer(cpu(), shape, var, in, segs, slots, RecurrenceMode::kAuto);
        const std::string what =
            absl::StrCat(var.name, " dk ", shape.dk, " dv ", shape.dv, " segments ", lens.size());
        if (lens[1] == 1) {  // decode: f32 arithmetic on exact bf16 inputs, one rounding at the end
          EXPECT_TRUE(AllNear(d.o, h.o, 10 * GetParam().atol, 10 * GetParam().rtol)) << what;
          EXPECT_TRUE(AllNear(d.state, h.state, 1e-6, 1.0 / 128)) << what;
        } else {
          EXPECT_TRUE(RelNear(d.o, h.o, GetParam().bf16_rel)) << what;
          EXPECT_TRUE(RelNear(d.state, h.state, GetParam().bf16_rel)) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceRecurrenceShapesTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
