// Every op on every device against the CPU twin on host copies (ggml's test-backend-ops), with
// poisoned outputs, strided inputs, ragged segments and non-contiguous slot ids; and the
// layer-level invariants on each device: a ragged batch equals its segments run alone, chunked
// equals token by token. Only the CPU instance runs without a GPU; the CUDA one is compiled in and
// skips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/feature_map.h"
#include "kernels/gates.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/recurrence.h"
#include "kernels/rope.h"
#include "kernels/short_conv.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::DeviceCase;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::RelNear;
using testing_util::SegmentTable;
using testing_util::TestContext;
using testing_util::ToDevice;
using testing_util::ToHost;

class DeviceOpsTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
    dev_ = std::make_unique<TestContext>(GetParam().device);
  }
  const ExecContext& dev() { return dev_->ctx; }
  const ExecContext& cpu() { return cpu_.ctx; }
  ::testing::AssertionResult Near(const std::vector<float>& a, const std::vector<float>& b,
                                  double scale = 1) {
    return AllNear(a, b, GetParam().atol * scale, GetParam().rtol * scale);
  }
  // ShortConvs against ShortConv per group over `segs` (ShortConvGroupsEqualOneConvPerGroup).
  void ConvGroupsCase(const std::vector<Segment>& segs);
  std::unique_ptr<TestContext> dev_;
  TestContext cpu_{Device::kCpu};
};

// Runs `op(ctx, inputs..., out)` on the device and on the CPU over the same host values and
// compares the outputs. Inputs are given as host vectors with shapes.
struct Arg {
  std::vector<float> values;
  Shape shape;
};

TEST_P(DeviceOpsTest, PointwiseOpsMatchTheCpuTwin) {
  const Arg x{RandomFloats(7 * 48, 1), {7, 48}}, y{RandomFloats(7 * 48, 2), {7, 48}};
  auto run = [&](const ExecContext& ctx, auto&& op) {
    Tensor a = ToDevice(ctx, x.values, x.shape), b = ToDevice(ctx, y.values, y.shape);
    Tensor out = Poisoned(ctx, x.shape);
    EXPECT_TRUE(op(ctx, a.view(), b.view(), out.view()).ok());
    return ToHost(ctx, out.view());
  };
  auto check = [&](const char* what, auto&& op) {
    EXPECT_TRUE(Near(run(dev(), op), run(cpu(), op))) << what;
  };
  for (Activation act :
       {Activation::kIdentity, Activation::kSilu, Activation::kRelu, Activation::kElu,
        Activation::kEluPlusOne, Activation::kSigmoid, Activation::kTanh, Activation::kGelu}) {
    check("Activate", [act](const ExecContext& c, TensorView a, TensorView, TensorView o) {
      return Activate(c, act, a, o);
    });
  }
  check("SwiGlu", [](const ExecContext& c, TensorView a, TensorView b, TensorView o) {
    return SwiGlu(c, a, b, o);
  });
  check("Add", [](const ExecContext& c, TensorView a, TensorView b, TensorView o) {
    return Add(c, a, b, o);
  });
  check("Mul", [](const ExecContext& c, TensorView a, TensorView b, TensorView o) {
    return Mul(c, a, b, o);
  });
  check("SigmoidScale", [](const ExecContext& c, TensorView a, TensorView, TensorView o) {
    return SigmoidScale(c, a, 2.0f, o);
  });
  check("GlaDecay", [](const ExecContext& c, TensorView a, TensorView, TensorView o) {
    return GlaDecay(c, a, 16.0f, -0.05f, o);
  });
  check("Fill", [](const ExecContext& c, TensorView, TensorView, TensorView o) {
    return Fill(c, 0.25f, o);
  });
  // Strided input: columns 8..40 of x.
  auto strided = [&](const ExecContext& ctx) {
    Tensor a = ToDevice(ctx, x.values, x.shape);
    Tensor out = Poisoned(ctx, {7, 32});
    EXPECT_TRUE(Activate(ctx, Activation::kSilu, a.view().Cols(8, 32), out.view()).ok());
    return ToHost(ctx, out.view());
  };
  EXPECT_TRUE(Near(strided(dev()), strided(cpu())));
}

// Head-wide groups (a warp each on CUDA) and hidden-wide ones (a block each: 2048, and 1000 whose
// last pass leaves threads idle), 5 rows.
TEST_P(DeviceOpsTest, NormsMatchTheCpuTwin) {
  for (const auto& [group, cols] :
       {std::pair<int64_t, int64_t>{16, 64}, {1000, 2000}, {2048, 2048}}) {
    const std::vector<float> xv = RandomFloats(5 * cols, 3), gv = RandomFloats(5 * cols, 4);
    const std::vector<float> wv = RandomFloats(group, 5);
    for (bool zero_centered : {false, true}) {
      auto run = [&](const ExecContext& c, int which) {
        Tensor x = ToDevice(c, xv, {5, cols}), g = ToDevice(c, gv, {5, cols});
        Tensor w = ToDevice(c, wv, {group}), y = Poisoned(c, {5, cols});
        const NormParams p{1e-5f, group, zero_centered};
        absl::Status s = which == 0   ? RmsNorm(c, x.view(), w.view(), p, y.view())
                         : which == 1 ? GatedRmsNorm(c, x.view(), g.view(), w.view(), p,
                                                     Activation::kSilu, y.view())
                         : which == 2 ? L2Normalize(c, x.view(), group, 1e-6f, y.view())
                                      : SumNormalize(c, x.view(), group, 1e-4f, y.view());
        EXPECT_TRUE(s.ok()) << s;
        return ToHost(c, y.view());
      };
      // SumNormalize (feature maps, head-wide only) divides by a sum of random signs, which a
      // wide group can bring near 0: it is checked on the narrow groups alone.
      for (int which = 0; which < (group > 16 ? 3 : 4); ++which) {
        EXPECT_TRUE(Near(run(dev(), which), run(cpu(), which), which == 3 ? 10 : 1))
            << "norm " << which << " group " << group;
      }
    }
  }
}

// AddRmsNorm: on each device bit-identical to Add then RmsNorm (the sum written back to h, the norm
// of it in y), and the device's within tolerance of the CPU twin; head-wide, 2000 and 2048 columns
// (the block-per-row kernel); a mismatched residual is refused by name.
TEST_P(DeviceOpsTest, AddRmsNormEqualsAddThenRmsNorm) {
  for (const auto& [group, cols] :
       {std::pair<int64_t, int64_t>{16, 64}, {2000, 2000}, {2048, 2048}}) {
    const std::vector<float> hv = RandomFloats(5 * cols, 51), rv = RandomFloats(5 * cols, 52);
    const std::vector<float> wv = RandomFloats(group, 53);
    // Plain, zero-centred (Qwen3.5) and no weight.
    for (const auto& [zero_centered, weighted] :
         {std::pair{false, true}, {true, true}, {false, false}}) {
      auto run = [&](const ExecContext& c, bool fused) {
        Tensor h = ToDevice(c, hv, {5, cols}), r = ToDevice(c, rv, {5, cols});
        Tensor w = ToDevice(c, wv, {group}), y = Poisoned(c, {5, cols});
        const TensorView wt = weighted ? w.view() : TensorView();
        const NormParams p{1e-5f, group, zero_centered};
        if (fused) {
          EXPECT_TRUE(AddRmsNorm(c, h.view(), r.view(), wt, p, y.view()).ok());
        } else {
          EXPECT_TRUE(Add(c, h.view(), r.view(), h.view()).ok());
          EXPECT_TRUE(RmsNorm(c, h.view(), wt, p, y.view()).ok());
        }
        std::vector<float> out = ToHost(c, y.view()), sum = ToHost(c, h.view());
        out.insert(out.end(), sum.begin(), sum.end());
        return out;
      };
      const std::vector<float> fused = run(dev(), true);
      EXPECT_EQ(fused, run(dev(), false)) << "group " << group << " zc " << zero_centered;
      EXPECT_TRUE(Near(fused, run(cpu(), false))) << "group " << group << " zc " << zero_centered;
      // The sum and its norm by hand (the CPU's own ops): catches a twin that skipped the add.
      const std::vector<float> cpu_fused = run(cpu(), true);
      const float s0 = hv[0] + rv[0];
      EXPECT_EQ(cpu_fused[5 * cols], s0);
      float ss = 0;
      for (int64_t j = 0; j < group; ++j) ss += (hv[j] + rv[j]) * (hv[j] + rv[j]);
      const float w0 = weighted ? wv[0] + (zero_centered ? 1.0f : 0.0f) : 1.0f;
      EXPECT_NEAR(cpu_fused[0], s0 / std::sqrt(ss / group + 1e-5f) * w0, 1e-4);
    }
  }
  const ExecContext& c = dev();
  Tensor h = ToDevice(c, RandomFloats(2 * 8, 54), {2, 8}),
         r = ToDevice(c, RandomFloats(8, 55), {1, 8});
  Tensor y = Poisoned(c, {2, 8});
  const absl::Status bad = AddRmsNorm(c, h.view(), r.view(), TensorView(), {1e-5f, 8}, y.view());
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), testing::HasSubstr("residual"));
  Tensor r2 = ToDevice(c, RandomFloats(2 * 8, 56), {2, 8});
  const absl::Status bad_y =
      AddRmsNorm(c, h.view(), r2.view(), TensorView(), {1e-5f, 8}, h.view().Cols(0, 4));
  EXPECT_THAT(std::string(bad_y.message()), testing::HasSubstr("AddRmsNorm"));
}

// ZeroTensors: 16-byte-aligned and unaligned rows, a tail that is not a multiple of 16 bytes, a
// strided view, and more views than one launch takes — each zeroed, every other byte untouched
// (the device equals the CPU twin bit for bit).
TEST_P(DeviceOpsTest, ZeroTensorsZeroEveryViewAndNothingElse) {
  const std::vector<float> av = RandomFloats(4 * 3, 61), bv = RandomFloats(300 * 8, 62);
  const std::vector<float> cv = RandomFloats(6 * 10, 63), dv = RandomFloats(3 * 70001, 64);
  auto run = [&](const ExecContext& c) {
    Tensor a = ToDevice(c, av, {4, 3}), b = ToDevice(c, bv, {300, 8});
    Tensor m = ToDevice(c, cv, {6, 10}), d = ToDevice(c, dv, {3, 70001});
    // a's rows 1 and 3: unaligned; a's row 0: aligned, 12 bytes (all tail); m: a strided view
    // and an unaligned row; d's row 0: aligned with a 4-byte tail, over 256 KB (several blocks of
    // the grid-stride loop); d's row 1: unaligned, as long; b: 150 aligned rows (two launches).
    std::vector<TensorView> views = {a.view().Rows(1, 1), a.view().Rows(3, 1), m.view().Cols(2, 5),
                                     m.view().Rows(5, 1), a.view().Rows(0, 1), d.view().Rows(0, 1),
                                     d.view().Rows(1, 1)};
    for (int r = 0; r < 300; r += 2) views.push_back(b.view().Rows(r, 1));  // > kMaxZeroRanges
    EXPECT_TRUE(ZeroTensors(c, views).ok());
    std::vector<float> out;
    for (const Tensor* t : {&a, &b, &m, &d}) {
      const std::vector<float> host = ToHost(c, t->view());
      out.insert(out.end(), host.begin(), host.end());
    }
    return out;
  };
  const std::vector<float> want = run(cpu());
  EXPECT_EQ(run(dev()), want);
  // The CPU twin itself: the listed bytes are 0, the others kept.
  const size_t b0 = 12, m0 = b0 + 2400, d0 = m0 + 60;
  EXPECT_EQ(want[0], 0.0f);
  EXPECT_EQ(want[3], 0.0f);
  EXPECT_EQ(want[6], av[6]);
  EXPECT_EQ(want[b0], 0.0f);
  EXPECT_EQ(want[b0 + 8], bv[8]);
  EXPECT_EQ(want[m0 + 2], 0.0f);
  EXPECT_EQ(want[m0 + 1], cv[1]);
  EXPECT_EQ(want[d0 + 70000], 0.0f);
  EXPECT_EQ(want[d0 + 2 * 70001 - 1], 0.0f);
  EXPECT_EQ(want[d0 + 2 * 70001], dv[2 * 70001]);
}

TEST_P(DeviceOpsTest, GatesFeatureMapsAndGathersMatchTheCpuTwin) {
  const std::vector<float> av = RandomFloats(9 * 6, 6), bv = RandomFloats(9 * 6, 7);
  const std::vector<float> alog = RandomFloats(6, 8, 0.5f), dtb = RandomFloats(6, 9, 0.5f);
  auto gates = [&](const ExecContext& c) {
    Tensor a = ToDevice(c, av, {9, 6}), b = ToDevice(c, bv, {9, 6});
    Tensor al = ToDevice(c, alog, {6}), db = ToDevice(c, dtb, {6});
    Tensor g = Poisoned(c, {9, 6}), beta = Poisoned(c, {9, 6});
    EXPECT_TRUE(
        GdnGates(c, a.view(), b.view(), al.view(), db.view(), 2.0f, g.view(), beta.view()).ok());
    std::vector<float> out = ToHost(c, g.view()), bo = ToHost(c, beta.view());
    out.insert(out.end(), bo.begin(), bo.end());
    return out;
  };
  EXPECT_TRUE(Near(gates(dev()), gates(cpu())));
  for (FeatureMapKind kind : {FeatureMapKind::kDpfp, FeatureMapKind::kHedgehog}) {
    auto fm = [&](const ExecContext& c) {
      Tensor x = ToDevice(c, av, {9, 6});
      Tensor y = Poisoned(c, {9, 6 * FeatureMapExpansion(kind)});
      EXPECT_TRUE(FeatureMap(c, kind, x.view(), y.view()).ok());
      return ToHost(c, y.view());
    };
    EXPECT_TRUE(Near(fm(dev()), fm(cpu())));
  }
  {  // DPFP's relu keeps a NaN a NaN, as the CPU twin's std::max does (fmaxf would give 0)
    const std::vector<float> xn = {std::nanf(""), -0.0f, 0.0f, 1.5f, -2.0f, 0.25f};
    auto fm = [&](const ExecContext& c) {
      Tensor x = ToDevice(c, xn, {1, 6});
      Tensor y = Poisoned(c, {1, 6 * FeatureMapExpansion(FeatureMapKind::kDpfp)});
      EXPECT_TRUE(FeatureMap(c, FeatureMapKind::kDpfp, x.view(), y.view()).ok());
      return ToHost(c, y.view());
    };
    const std::vector<float> d = fm(dev()), h = fm(cpu());
    ASSERT_EQ(d.size(), h.size());
    int nans = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      nans += std::isnan(h[i]);
      EXPECT_EQ(std::isnan(d[i]), std::isnan(h[i])) << i << ": " << d[i] << " vs " << h[i];
      if (!std::isnan(h[i])) {
        EXPECT_NEAR(d[i], h[i], 1e-6) << i;
      }
    }
    EXPECT_GT(nans, 0);
  }
  const std::vector<float> table = RandomFloats(50 * 12, 10);
  const std::vector<int32_t> ids = {3, 49, 0, 3, 17};
  auto gather = [&](const ExecContext& c) {
    Tensor t = ToDevice(c, table, {50, 12});
    Tensor tok = ToDevice(c, ids, DType::kI32, {5});
    Tensor e = Poisoned(c, {5, 12}), last = Poisoned(c, {2, 12});
    const std::vector<int32_t> rows = {4, 1};
    Tensor r = ToDevice(c, rows, DType::kI32, {2});
    EXPECT_TRUE(Embedding(c, t.view(), tok.view(), e.view()).ok());
    EXPECT_TRUE(GatherRows(c, e.view(), r.view(), last.view()).ok());
    std::vector<float> out = ToHost(c, e.view()), l = ToHost(c, last.view());
    out.insert(out.end(), l.begin(), l.end());
    return out;
  };
  EXPECT_TRUE(Near(gather(dev()), gather(cpu())));
}

TEST_P(DeviceOpsTest, LinearMatchesTheCpuTwinWithBiasStridesAndAccumulate) {
  const int m = 13, k = 70, n = 33;
  const std::vector<float> xv = RandomFloats(m * (k + 6), 11), wv = RandomFloats(n * k, 12);
  const std::vector<float> bv = RandomFloats(n, 13), yv = RandomFloats(m * n, 14);
  auto run = [&](const ExecContext& c) {
    Tensor x = ToDevice(c, xv, {m, k + 6}), w = ToDevice(c, wv, {n, k}), b = ToDevice(c, bv, {n});
    Tensor y = ToDevice(c, yv, {m, n});
    const TensorView bias = b.view();
    EXPECT_TRUE(Linear(c, x.view().Cols(3, k), w.view(), y.view(), &bias, true).ok());
    return ToHost(c, y.view());
  };
  EXPECT_TRUE(Near(run(dev()), run(cpu()), 10));
}

// Ragged segments over non-contiguous slots: {1, 2, 63, 64, 65, 200} tokens in slots
// {7, 2, 30, 0, 11, 5} of a 32-slot state.
std::vector<Segment> RaggedSegments() {
  const int64_t lens[] = {1, 2, 63, 64, 65, 200}, slots[] = {7, 2, 30, 0, 11, 5};
  std::vector<Segment> segs;
  int64_t row = 0;
  for (int i = 0; i < 6; ++i) {
    segs.push_back({row, lens[i], 3 * i, slots[i]});
    row += lens[i];
  }
  return segs;
}

TEST_P(DeviceOpsTest, ShortConvAndRopeOverRaggedSegments) {
  const std::vector<Segment> segs = RaggedSegments();
  const int64_t t = segs.back().row_begin + segs.back().num_tokens, c = 24, w = 4;
  const std::vector<float> xv = RandomFloats(t * c, 15), wv = RandomFloats(c * w, 16);
  const std::vector<float> sv = RandomFloats(32 * c * w, 17);
  auto run = [&](const ExecContext& ctx) {
    Tensor x = ToDevice(ctx, xv, {t, c}), wt = ToDevice(ctx, wv, {c, w});
    Tensor st = ToDevice(ctx, sv, {32, c, w}), y = Poisoned(ctx, {t, c});
    Tensor table = SegmentTable(ctx, segs);
    const Segments s{segs, table.view(), {}};
    EXPECT_TRUE(
        ShortConv(ctx, x.view(), wt.view(), s, st.view(), Activation::kSilu, y.view()).ok());
    EXPECT_TRUE(Rope(ctx, y.view(), s, {3, 8, 6, 500.0}).ok());
    std::vector<float> out = ToHost(ctx, y.view()), state = ToHost(ctx, st.view());
    out.insert(out.end(), state.begin(), state.end());
    return out;
  };
  EXPECT_TRUE(Near(run(dev()), run(cpu())));
}

// ShortConvs: three groups of different widths and channel counts (one over a 128-channel block,
// inputs as column views of one projection, outputs side by side in one tensor) in one call equal
// three ShortConv calls on the CPU, outputs and states; prefill-long and decode segments.
TEST_P(DeviceOpsTest, ShortConvGroupsEqualOneConvPerGroup) {
  std::vector<Segment> decode;  // one token each: the kernel rewrites the states itself
  for (int i = 0; i < 5; ++i) decode.push_back({i, 1, 9, (7 * i + 3) % 32});
  for (const std::vector<Segment>& segs : {RaggedSegments(), decode}) {
    ConvGroupsCase(segs);
  }
}

void DeviceOpsTest::ConvGroupsCase(const std::vector<Segment>& segs) {
  const int64_t t = segs.back().row_begin + segs.back().num_tokens;
  const int64_t cs[3] = {24, 130, 7}, ws[3] = {4, 3, 2}, total = 24 + 130 + 7;
  const std::vector<float> xv = RandomFloats(t * total, 31);
  std::vector<std::vector<float>> wv, sv;
  for (int i = 0; i < 3; ++i) {
    wv.push_back(RandomFloats(cs[i] * ws[i], 32 + i));
    sv.push_back(RandomFloats(32 * cs[i] * ws[i], 35 + i));
  }
  auto run = [&](const ExecContext& ctx, bool grouped) {
    Tensor x = ToDevice(ctx, xv, {t, total}), y = Poisoned(ctx, {t, total});
    std::vector<Tensor> w, st;
    for (int i = 0; i < 3; ++i) {
      w.push_back(ToDevice(ctx, wv[i], {cs[i], ws[i]}));
      st.push_back(ToDevice(ctx, sv[i], {32, cs[i], ws[i]}));
    }
    Tensor table = SegmentTable(ctx, segs);
    const Segments s{segs, table.view(), {}};
    std::vector<ConvGroup> groups;
    for (int i = 0, c0 = 0; i < 3; c0 += static_cast<int>(cs[i]), ++i) {
      groups.push_back(
          {x.view().Cols(c0, cs[i]), w[i].view(), st[i].view(), y.view().Cols(c0, cs[i])});
    }
    if (grouped) {
      EXPECT_TRUE(ShortConvs(ctx, groups, s, Activation::kSilu).ok());
    } else {
      for (const ConvGroup& g : groups) {
        EXPECT_TRUE(ShortConv(ctx, g.x, g.w, s, g.state, Activation::kSilu, g.y).ok());
      }
    }
    std::vector<float> out = ToHost(ctx, y.view());
    for (const Tensor& x : st) {
      const std::vector<float> state = ToHost(ctx, x.view());
      out.insert(out.end(), state.begin(), state.end());
    }
    return out;
  };
  const std::vector<float> want = run(cpu(), false);
  EXPECT_TRUE(Near(run(dev(), true), want)) << segs.size() << " segments";
  EXPECT_EQ(run(cpu(), true), want);  // the CPU loop is the per-group op itself
}

TEST_P(DeviceOpsTest, ShortConvGroupsRefuseBadGroups) {
  const ExecContext ctx = dev();
  const std::vector<Segment> segs = {{0, 2, 0, 0}};
  Tensor table = SegmentTable(ctx, segs);
  const Segments s{segs, table.view(), {}};
  Tensor x = ToDevice(ctx, RandomFloats(2 * 8, 41), {2, 8}), y = Poisoned(ctx, {2, 8});
  Tensor w = ToDevice(ctx, RandomFloats(4 * 3, 42), {4, 3});
  Tensor st = ToDevice(ctx, RandomFloats(4 * 3, 43), {1, 4, 3});
  const ConvGroup ok{x.view().Cols(0, 4), w.view(), st.view(), y.view().Cols(0, 4)};
  auto status = [&](std::vector<ConvGroup> groups) {
    return ShortConvs(ctx, groups, s, Activation::kSilu);
  };
  EXPECT_TRUE(status({ok}).ok());
  EXPECT_THAT(std::string(status({}).message()), testing::HasSubstr("0 groups"));
  EXPECT_THAT(std::string(status({ok, ok, ok, ok, ok}).message()), testing::HasSubstr("5 groups"));
  ConvGroup wide = ok;  // 8 channels against a 4-channel weight
  wide.x = x.view();
  wide.y = y.view();
  EXPECT_THAT(std::string(status({ok, wide}).message()), testing::HasSubstr("group 1"));
  ConvGroup in_place = ok;  // writes what another group reads
  in_place.y = x.view().Cols(4, 4);
  const ConvGroup other{x.view().Cols(4, 4), w.view(), st.view(), y.view().Cols(4, 4)};
  EXPECT_THAT(std::string(status({other, in_place}).message()),
              testing::HasSubstr("group 1's output overlaps group 0's input"));
  ConvGroup self = ok;  // a single conv in place
  self.y = self.x;
  EXPECT_THAT(
      std::string(
          ShortConv(ctx, self.x, self.w, s, self.state, Activation::kSilu, self.y).message()),
      testing::HasSubstr("overlaps"));
}

// Scales every `dim`-long row of x to unit length (unit keys keep the delta rule stable).
void UnitRows(std::vector<float>& x, int64_t dim) {
  for (size_t r = 0; r + static_cast<size_t>(dim) <= x.size(); r += static_cast<size_t>(dim)) {
    float n = 0;
    for (int64_t j = 0; j < dim; ++j) n += x[r + j] * x[r + j];
    for (int64_t j = 0; j < dim; ++j) x[r + j] /= std::sqrt(n);
  }
}

struct RecCase {
  DecayKind decay;
  bool delta, normalize;
};

class DeviceRecurrenceTest : public DeviceOpsTest {
 protected:
  // Runs the recurrence of `rc` over `segs` (whose slots index a 32-slot state), with H = 4
  // output heads reading 2 key/query heads (grouped), dk = 16, dv = 12 (or `dv`: 96 spreads a
  // head over three 32-column tiles of the step kernel, which share the normaliser z). Returns
  // the output, the state and z.
  std::vector<float> Run(const ExecContext& ctx, const RecCase& rc,
                         const std::vector<Segment>& segs, RecurrenceMode mode, int64_t dv = 12) {
    const int64_t t = segs.back().row_begin + segs.back().num_tokens, h = 4, dk = 16;
    std::vector<float> q = RandomFloats(t * 2 * dk, 21), k = RandomFloats(t * 2 * dk, 22);
    if (rc.normalize) {
      for (float& x : q) x = std::abs(x);
      for (float& x : k) x = std::abs(x) * 0.1f;
    }
    if (rc.delta) UnitRows(k, dk);
    std::vector<float> g = RandomFloats(t * (rc.decay == DecayKind::kVector ? 2 * dk : h), 23);
    for (float& x : g) x = -0.3f * std::abs(x);
    std::vector<float> beta = RandomFloats(t * h, 24);
    for (float& x : beta) x = 1 / (1 + std::exp(-x));
    Tensor tq = ToDevice(ctx, q, {t, 2 * dk}), tk = ToDevice(ctx, k, {t, 2 * dk});
    Tensor tv = ToDevice(ctx, RandomFloats(t * h * dv, 25), {t, h * dv});
    Tensor tg = ToDevice(ctx, g, {t, static_cast<int64_t>(g.size()) / t});
    Tensor tb = ToDevice(ctx, beta, {t, h});
    Tensor state = ToDevice(ctx, RandomFloats(32 * h * dk * dv, 26, 0.1f), {32, h, dk, dv});
    std::vector<float> zv = RandomFloats(32 * h * dk, 27);
    for (float& x : zv) x = std::abs(x);
    Tensor z = ToDevice(ctx, zv, {32, h, dk});
    Tensor o = Poisoned(ctx, {t, h * dv});
    Tensor table = SegmentTable(ctx, segs);
    RecurrenceInputs in;
    in.q = tq.view();
    in.k = tk.view();
    in.v = tv.view();
    if (rc.decay != DecayKind::kNone) in.g = tg.view();
    if (rc.delta) in.beta = tb.view();
    const RecurrenceSpec spec{16, static_cast<int>(dv), rc.decay, rc.delta, rc.normalize, 0.25f};
    absl::Status s = Recurrence(ctx, spec, in, {segs, table.view()}, state.view(),
                                rc.normalize ? z.view() : TensorView(), {mode, 16}, o.view());
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out = ToHost(ctx, o.view()), st = ToHost(ctx, state.view());
    out.insert(out.end(), st.begin(), st.end());
    if (rc.normalize) {
      const std::vector<float> zs = ToHost(ctx, z.view());
      out.insert(out.end(), zs.begin(), zs.end());
    }
    return out;
  }
};

TEST_P(DeviceRecurrenceTest, MatchesTheCpuTwinAndItsInvariants) {
  const std::vector<Segment> segs = RaggedSegments();
  for (const RecCase& rc :
       {RecCase{DecayKind::kNone, false, false}, RecCase{DecayKind::kNone, false, true},
        RecCase{DecayKind::kScalar, false, false}, RecCase{DecayKind::kVector, false, false},
        RecCase{DecayKind::kNone, true, false}, RecCase{DecayKind::kScalar, true, false}}) {
    const std::string what = absl::StrCat("decay ", static_cast<int>(rc.decay), " delta ", rc.delta,
                                          " normalize ", rc.normalize);
    const std::vector<float> dev_auto = Run(dev(), rc, segs, RecurrenceMode::kAuto);
    const std::vector<float> cpu_auto = Run(cpu(), rc, segs, RecurrenceMode::kAuto);
    const double bf16_rel = GetParam().bf16_rel;
    if (bf16_rel == 0) {  // f32 throughout (CPU): chunked = token by token to f32 rounding
      EXPECT_TRUE(Near(dev_auto, cpu_auto, 10)) << what;
      EXPECT_TRUE(AllNear(Run(dev(), rc, segs, RecurrenceMode::kChunked),
                          Run(dev(), rc, segs, RecurrenceMode::kRecurrent), 2e-4, 2e-4))
          << what;
      continue;
    }
    // CUDA: the token-by-token kernel is f32; the chunked form runs on tensor cores with bf16
    // operands (f32 accumulation and state), so it is held to the bf16 band.
    const std::vector<float> dev_recurrent = Run(dev(), rc, segs, RecurrenceMode::kRecurrent);
    EXPECT_TRUE(Near(dev_recurrent, Run(cpu(), rc, segs, RecurrenceMode::kRecurrent), 10)) << what;
    EXPECT_TRUE(RelNear(dev_auto, cpu_auto, bf16_rel)) << what;
    EXPECT_TRUE(RelNear(Run(dev(), rc, segs, RecurrenceMode::kChunked), dev_recurrent, bf16_rel))
        << what;
  }
}

// The normaliser across several 32-column tiles of dv (the CUDA step kernel runs one block per
// tile and head; the tiles share z, which is committed after them): output, state and z as the
// CPU twin's. The normaliser always runs token by token (no chunked form).
TEST_P(DeviceRecurrenceTest, NormaliserAcrossValueTilesMatchesTheCpuTwin) {
  const std::vector<Segment> segs = RaggedSegments();
  const RecCase rc{DecayKind::kNone, false, true};
  EXPECT_TRUE(Near(Run(dev(), rc, segs, RecurrenceMode::kAuto, 96),
                   Run(cpu(), rc, segs, RecurrenceMode::kAuto, 96), 10));
}

// Batches wide enough that the CUDA chunked scan picks its wide value tiles (64 and 32 columns
// per block instead of 16: the choice follows the block count against twice the SM count, which
// the small shapes above never reach): gated delta rule, 16 heads, dk/dv of 64 and 128, segments
// of 130 tokens (two full chunks and a partial one) in non-contiguous slots. CUDA chunked vs its
// token-by-token kernel (bf16 band) and vs the CPU twin.
TEST_P(DeviceRecurrenceTest, WideBatchesMatchTheCpuTwin) {
  struct Wide {
    int64_t segments, dk, dv;
  };
  for (const Wide w : {Wide{12, 128, 128}, Wide{5, 64, 128}, Wide{3, 64, 64}}) {
    const int64_t h = 16, len = 130;
    std::vector<Segment> segs;
    for (int64_t i = 0; i < w.segments; ++i) segs.push_back({i * len, len, 0, 2 * i + 1});
    const int64_t t = w.segments * len;
    auto run = [&](const ExecContext& ctx, RecurrenceMode mode) {
      std::vector<float> k = RandomFloats(t * h * w.dk, 41);
      UnitRows(k, w.dk);
      std::vector<float> g = RandomFloats(t * h, 42), beta = RandomFloats(t * h, 43);
      for (float& x : g) x = -0.2f * std::abs(x);
      for (float& x : beta) x = 1 / (1 + std::exp(-x));
      Tensor tq = ToDevice(ctx, RandomFloats(t * h * w.dk, 44), {t, h * w.dk});
      Tensor tk = ToDevice(ctx, k, {t, h * w.dk});
      Tensor tv = ToDevice(ctx, RandomFloats(t * h * w.dv, 45), {t, h * w.dv});
      Tensor tg = ToDevice(ctx, g, {t, h}), tb = ToDevice(ctx, beta, {t, h});
      const int64_t slots = 2 * w.segments + 1;
      Tensor state =
          ToDevice(ctx, RandomFloats(slots * h * w.dk * w.dv, 46, 0.05f), {slots, h, w.dk, w.dv});
      Tensor o = Poisoned(ctx, {t, h * w.dv});
      Tensor table = SegmentTable(ctx, segs);
      RecurrenceInputs in;
      in.q = tq.view();
      in.k = tk.view();
      in.v = tv.view();
      in.g = tg.view();
      in.beta = tb.view();
      const RecurrenceSpec spec{static_cast<int>(w.dk),
                                static_cast<int>(w.dv),
                                DecayKind::kScalar,
                                true,
                                false,
                                1.0f / std::sqrt(static_cast<float>(w.dk))};
      const absl::Status st =
          Recurrence(ctx, spec, in, {segs, table.view()}, state.view(), {}, {mode, 64}, o.view());
      EXPECT_TRUE(st.ok()) << st;
      std::vector<float> out = ToHost(ctx, o.view()), sv = ToHost(ctx, state.view());
      out.insert(out.end(), sv.begin(), sv.end());
      return out;
    };
    const std::string what = absl::StrCat(w.segments, " segments, dk ", w.dk, " dv ", w.dv);
    const std::vector<float> dev_chunked = run(dev(), RecurrenceMode::kChunked);
    const std::vector<float> cpu_recurrent = run(cpu(), RecurrenceMode::kRecurrent);
    const double bf16_rel = GetParam().bf16_rel;
    if (bf16_rel == 0) {  // the CPU: chunked = token by token to f32 rounding
      EXPECT_TRUE(AllNear(dev_chunked, cpu_recurrent, 2e-4, 2e-4)) << what;
      continue;
    }
    EXPECT_TRUE(RelNear(dev_chunked, cpu_recurrent, bf16_rel)) << what;
    EXPECT_TRUE(Near(run(dev(), RecurrenceMode::kRecurrent), cpu_recurrent, 10)) << what;
  }
}

TEST_P(DeviceRecurrenceTest, RefusesBadSlotsAndShapes) {
  TestContext& t = *dev_;
  Tensor q = Poisoned(t.ctx, {3, 16}), state = Poisoned(t.ctx, {2, 1, 16, 12});
  Tensor v = Poisoned(t.ctx, {3, 12}), o = Poisoned(t.ctx, {3, 12});
  RecurrenceInputs in;
  in.q = q.view();
  in.k = q.view();
  in.v = v.view();
  const RecurrenceSpec spec{16, 12, DecayKind::kNone, false, false, 1};
  const Segment bad_slot{0, 3, 0, 2};
  EXPECT_FALSE(
      Recurrence(t.ctx, spec, in, {{&bad_slot, 1}, {}}, state.view(), {}, {}, o.view()).ok());
  const Segment short_seg{0, 2, 0, 0};
  EXPECT_FALSE(
      Recurrence(t.ctx, spec, in, {{&short_seg, 1}, {}}, state.view(), {}, {}, o.view()).ok());
  // The segment table's device copy must be I64 [segments, 4] on the device (kernels read it).
  const Segment good{0, 3, 0, 1};
  Tensor narrow = ToDevice(t.ctx, std::vector<int64_t>{0, 3, 0}, DType::kI64, {1, 3});
  absl::Status st =
      Recurrence(t.ctx, spec, in, {{&good, 1}, narrow.view()}, state.view(), {}, {}, o.view());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("segment table"), std::string::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceOpsTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);
INSTANTIATE_TEST_SUITE_P(Devices, DeviceRecurrenceTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
