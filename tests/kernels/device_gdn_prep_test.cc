// GdnPrep (kernels/recurrence.h): the recurrence handed raw q, k and gate projections a, b must
// give what L2Normalize + GdnGates + the recurrence give — on the same device, and against the
// CPU twin. On CUDA a call whose segments all take the step kernel folds the preparation into it
// (f32 arithmetic in another order: f32 tolerances); a call with a chunked segment prepares in
// place first (the same ops: identical results). Also: the refusals that name the bad part.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gates.h"
#include "kernels/norm.h"
#include "kernels/recurrence.h"
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::SegmentTable;
using testing_util::ToDevice;
using testing_util::ToHostFloats;

struct GdnShape {
  int hq, h, dk, dv;  // q/k heads, value (= gate, β, output) heads, dims
};

// Raw inputs: q, k unnormalised; a, b gate projections; per-head a_log, dt_bias.
struct RawInputs {
  std::vector<float> q, k, v, a, b, a_log, dt_bias, state;
  RawInputs(const GdnShape& s, int64_t t, int64_t slots, uint32_t seed) {
    q = RandomFloats(t * s.hq * s.dk, seed + 1, 2.0f);
    k = RandomFloats(t * s.hq * s.dk, seed + 2, 2.0f);
    v = RandomFloats(t * s.h * s.dv, seed + 3);
    a = RandomFloats(t * s.h, seed + 4, 3.0f);
    b = RandomFloats(t * s.h, seed + 5, 3.0f);
    a_log = RandomFloats(s.h, seed + 6);
    dt_bias = RandomFloats(s.h, seed + 7);
    state = RandomFloats(slots * s.h * s.dk * s.dv, seed + 8, 0.05f);
  }
};

struct Result {
  absl::Status status;
  std::vector<float> o, state;
  std::vector<float> q_after;  // q after the call: raw where the step kernel folded GdnPrep
};

std::vector<Segment> Packed(const std::vector<int64_t>& lens, int64_t slots) {
  std::vector<Segment> segs;
  int64_t row = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    segs.push_back(
        {row, lens[i], 2 * static_cast<int64_t>(i), (5 * static_cast<int64_t>(i) + 1) % slots});
    row += lens[i];
  }
  return segs;
}

// One layer call; `fold`: GdnPrep, else the three ops first (as the mixers did before it).
Result RunLayer(const ExecContext& ctx, const GdnShape& s, const RawInputs& in,
                const std::vector<Segment>& segs, int64_t slots, bool fold, float beta_scale,
                RecurrenceMode mode = RecurrenceMode::kAuto) {
  const int64_t t = segs.back().row_begin + segs.back().num_tokens;
  Tensor q = ToDevice(ctx, in.q, {t, int64_t{s.hq} * s.dk});
  Tensor k = ToDevice(ctx, in.k, {t, int64_t{s.hq} * s.dk});
  Tensor v = ToDevice(ctx, in.v, {t, int64_t{s.h} * s.dv});
  Tensor a = ToDevice(ctx, in.a, {t, s.h});
  Tensor b = ToDevice(ctx, in.b, {t, s.h});
  Tensor a_log = ToDevice(ctx, in.a_log, {s.h});
  Tensor dt_bias = ToDevice(ctx, in.dt_bias, {s.h});
  Tensor state = ToDevice(ctx, in.state, {slots, s.h, s.dk, s.dv});
  Tensor o = Poisoned(ctx, {t, int64_t{s.h} * s.dv});
  Tensor table = SegmentTable(ctx, segs);
  const float eps = 1e-6f;
  Result r;
  RecurrenceInputs ri;
  ri.q = q.view();
  ri.k = k.view();
  ri.v = v.view();
  ri.g = a.view();
  ri.beta = b.view();
  if (fold) {
    ri.gdn = GdnPrep{a_log.view(), dt_bias.view(), beta_scale, eps};
  } else {
    r.status.Update(L2Normalize(ctx, q.view(), s.dk, eps, q.view()));
    r.status.Update(L2Normalize(ctx, k.view(), s.dk, eps, k.view()));
    r.status.Update(GdnGates(ctx, a.view(), b.view(), a_log.view(), dt_bias.view(), beta_scale,
                             a.view(), b.view()));
  }
  const RecurrenceSpec spec{s.dk,
                            s.dv,
                            DecayKind::kScalar,
                            /*delta_rule=*/true,
                            /*normalize=*/false,
                            1.0f / std::sqrt(static_cast<float>(s.dk))};
  r.status.Update(
      Recurrence(ctx, spec, ri, {segs, table.view()}, state.view(), {}, {mode, 64}, o.view()));
  r.o = testing_util::ToHost(ctx, o.view());
  r.state = ToHostFloats(ctx, state.view());
  r.q_after = testing_util::ToHost(ctx, q.view());
  return r;
}

using GdnPrepTest = testing_util::DeviceOpsTest;

TEST_P(GdnPrepTest, FoldedEqualsTheSeparateOpsAndTheCpuTwin) {
  const GdnShape shapes[] = {
      {2, 2, 128, 128},  // Qwen3.5-0.8B heads (fewer of them)
      {2, 6, 64, 96},    // GVA: 3 value heads per q/k head
      {1, 1, 256, 512},  // fla 1.3B GDN head
      {1, 2, 16, 12},    // tiny dims (masked rows and columns)
  };
  struct Layout {
    const char* name;
    std::vector<int64_t> lens;
    bool folded_on_cuda;  // every segment takes the step kernel
  };
  const Layout layouts[] = {
      {"decode", {1, 1, 1, 1, 1}, true},
      {"short segments", {1, 3, 7}, true},
      {"with a chunked segment", {1, 100, 1}, false},
  };
  for (const GdnShape& s : shapes) {
    for (const Layout& l : layouts) {
      for (const float beta_scale : {1.0f, 2.0f}) {
        const int64_t slots = 13;
        const std::vector<Segment> segs = Packed(l.lens, slots);
        const RawInputs in(s, segs.back().row_begin + segs.back().num_tokens, slots, 40);
        const std::string what = absl::StrCat(l.name, ", dk ", s.dk, " dv ", s.dv, " heads ", s.hq,
                                              "/", s.h, ", beta scale ", beta_scale);
        const Result folded = RunLayer(dev(), s, in, segs, slots, true, beta_scale);
        const Result apart = RunLayer(dev(), s, in, segs, slots, false, beta_scale);
        const Result twin = RunLayer(cpu(), s, in, segs, slots, false, beta_scale);
        ASSERT_TRUE(folded.status.ok()) << what << ": " << folded.status;
        ASSERT_TRUE(apart.status.ok()) << what << ": " << apart.status;
        if (GetParam().device != Device::kCpu && l.folded_on_cuda) {
          EXPECT_EQ(folded.q_after, in.q) << what << ": not folded (q was prepared in place)";
        } else {
          EXPECT_NE(folded.q_after, in.q) << what << ": q was not prepared";
        }
        if (GetParam().device == Device::kCpu || !l.folded_on_cuda) {  // the same ops, in place
          EXPECT_EQ(folded.o, apart.o) << what;
          EXPECT_EQ(folded.state, apart.state) << what;
        } else {
          EXPECT_TRUE(AllNear(folded.o, apart.o, 1e-5, 1e-5)) << what;
          EXPECT_TRUE(AllNear(folded.state, apart.state, 1e-5, 1e-5)) << what;
        }
        if (GetParam().device != Device::kCpu && !l.folded_on_cuda) {
          // The chunked segment's bf16 tensor-core products (see device_recurrence_test.cc).
          EXPECT_TRUE(testing_util::RelNear(folded.o, twin.o, GetParam().bf16_rel)) << what;
          EXPECT_TRUE(testing_util::RelNear(folded.state, twin.state, GetParam().bf16_rel)) << what;
        } else {
          EXPECT_TRUE(AllNear(folded.o, twin.o, 10 * GetParam().atol, 10 * GetParam().rtol))
              << what;
          EXPECT_TRUE(AllNear(folded.state, twin.state, 10 * GetParam().atol, 10 * GetParam().rtol))
              << what;
        }
      }
    }
  }
}

// Token by token everywhere (kRecurrent): a long segment folds too on CUDA.
TEST_P(GdnPrepTest, RecurrentModeFoldsLongSegments) {
  const GdnShape s{2, 2, 128, 128};
  const int64_t slots = 4;
  const std::vector<Segment> segs = Packed({1, 90}, slots);
  const RawInputs in(s, 91, slots, 7);
  const Result folded = RunLayer(dev(), s, in, segs, slots, true, 1.0f, RecurrenceMode::kRecurrent);
  const Result twin = RunLayer(cpu(), s, in, segs, slots, false, 1.0f, RecurrenceMode::kRecurrent);
  ASSERT_TRUE(folded.status.ok()) << folded.status;
  EXPECT_TRUE(AllNear(folded.o, twin.o, 1e-4, 1e-4));
  EXPECT_TRUE(AllNear(folded.state, twin.state, 1e-4, 1e-4));
}

TEST_P(GdnPrepTest, RefusalsNameTheBadPart) {
  const int64_t slots = 2, t = 2;
  const std::vector<Segment> segs = Packed({1, 1}, slots);
  Tensor table = SegmentTable(dev(), segs);
  Tensor q = Poisoned(dev(), {t, 16}), v = Poisoned(dev(), {t, 32}), a = Poisoned(dev(), {t, 2}),
         b = Poisoned(dev(), {t, 2}), b1 = Poisoned(dev(), {t, 1}), two = Poisoned(dev(), {2}),
         three = Poisoned(dev(), {3}), o = Poisoned(dev(), {t, 32});
  Tensor state = ToDevice(dev(), std::vector<float>(slots * 2 * 16 * 16, 0.0f), {slots, 2, 16, 16});
  const RecurrenceSpec gdn{16, 16, DecayKind::kScalar, true, false, 0.25f};
  auto call = [&](const RecurrenceSpec& spec, RecurrenceInputs ri) {
    return Recurrence(dev(), spec, ri, {segs, table.view()}, state.view(), {}, {}, o.view());
  };
  RecurrenceInputs ri;
  ri.q = ri.k = q.view();
  ri.v = v.view();
  ri.g = a.view();
  ri.beta = b.view();
  ri.gdn = GdnPrep{three.view(), two.view()};
  absl::Status st = call(gdn, ri);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("a_log"), std::string::npos) << st;
  ri.gdn = GdnPrep{two.view(), three.view()};
  st = call(gdn, ri);
  EXPECT_NE(st.message().find("dt_bias"), std::string::npos) << st;
  ri.gdn = GdnPrep{two.view(), two.view()};
  ri.beta = b1.view();
  st = call(gdn, ri);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("beta"), std::string::npos) << st;
  ri.beta = b.view();
  ri.gdn->l2_eps = -1.0f;
  st = call(gdn, ri);
  EXPECT_NE(st.message().find("l2_eps"), std::string::npos) << st;
  ri.gdn->l2_eps = 1e-6f;
  const RecurrenceSpec no_delta{16, 16, DecayKind::kScalar, false, false, 0.25f};
  st = call(no_delta, ri);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("GdnPrep"), std::string::npos) << st;
  EXPECT_TRUE(call(gdn, ri).ok());  // and the same call, well-formed, runs
}

INSTANTIATE_TEST_SUITE_P(Devices, GdnPrepTest, ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
