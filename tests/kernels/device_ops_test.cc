// Every op on every device against the CPU twin on host copies (ggml's test-backend-ops), with
// poisoned outputs, strided inputs, ragged segments and non-contiguous slot ids; and the
// layer-level invariants on each device: a ragged batch equals its segments run alone, chunked
// equals token by token. Only the CPU instance runs without a GPU; the CUDA one is compiled in and
// skips.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::DeviceCase;
using testing_util::DeviceOpsTest;
using testing_util::Poisoned;
using testing_util::RaggedSegments;
using testing_util::RandomFloats;
using testing_util::RelNear;
using testing_util::SegmentTable;
using testing_util::TestContext;
using testing_util::ToDevice;
using testing_util::ToHost;

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

// HeadNormRope = RmsNorm per head, then Rope, into contiguous heads: Qwen3.5's gated q (heads 2d
// apart, the gates left behind) and its k in place, a head whose rotary half (25) is no multiple
// of 32, no weight; on every device against the two ops run apart on the CPU (bit for bit there:
// the CPU twin is that composition, this checks its copy of the strided heads), and refusals by
// name.
TEST_P(DeviceOpsTest, HeadNormRopeIsRmsNormThenRope) {
  const std::vector<Segment> segs = RaggedSegments();
  const int64_t t = segs.back().row_begin + segs.back().num_tokens;
  struct Case {
    int heads, d, rotary;
    int64_t stride;
    bool weight, in_place;
    bool zero_centered = true;
    int64_t row_pad = 0;  // in place: the heads are the first columns of wider rows (k in kv rows)
  };
  // The last three: in place in strided rows without the zero-centred weight (Qwen3.5's k is a
  // view into its k|v rows), and heads wider than CUDA's fused kernel takes (511: there RmsNorm
  // and Rope run apart), strided and in place.
  for (const Case& c : {Case{8, 256, 64, 512, true, false}, Case{2, 256, 64, 256, true, true},
                        Case{3, 100, 50, 130, false, false}, Case{4, 32, 32, 32, true, true},
                        Case{2, 128, 128, 128, true, true, false, 256},
                        Case{2, 512, 64, 1024, true, false}, Case{1, 640, 128, 640, true, true}}) {
    SCOPED_TRACE(testing::Message() << c.heads << " heads of " << c.d << ", stride " << c.stride
                                    << ", row pad " << c.row_pad);
    const int64_t xw = (c.heads - 1) * c.stride + c.d + 3;  // 3 more columns: a gate's tail
    const std::vector<float> xv = RandomFloats(t * xw, 41, 2.0f), wv = RandomFloats(c.d, 42);
    const NormParams norm{1e-6f, c.d, c.zero_centered};
    const RopeParams rope{c.heads, c.d, c.rotary, 10000000.0};
    // The two ops apart, on the CPU: heads copied out, RmsNorm per head, Rope.
    std::vector<float> heads(static_cast<size_t>(t * c.heads * c.d));
    for (int64_t r = 0; r < t; ++r) {
      for (int h = 0; h < c.heads; ++h) {
        for (int i = 0; i < c.d; ++i)
          heads[(r * c.heads + h) * c.d + i] = xv[r * xw + h * c.stride + i];
      }
    }
    Tensor table = SegmentTable(cpu(), segs);
    const Segments cs{segs, table.view(), {}};
    Tensor want = ToDevice(cpu(), heads, {t, int64_t{c.heads} * c.d});
    Tensor cw = ToDevice(cpu(), wv, {c.d});
    ASSERT_TRUE(
        RmsNorm(cpu(), want.view(), c.weight ? cw.view() : TensorView(), norm, want.view()).ok());
    ASSERT_TRUE(Rope(cpu(), want.view(), cs, rope).ok());
    const int64_t hw = int64_t{c.heads} * c.d;
    std::vector<float> padded(static_cast<size_t>(t * (hw + c.row_pad)), -7.0f);
    for (int64_t r = 0; r < t; ++r) {
      std::copy_n(heads.begin() + r * hw, hw, padded.begin() + r * (hw + c.row_pad));
    }
    auto run = [&](const ExecContext& ctx) {
      Tensor x =
          c.in_place ? ToDevice(ctx, padded, {t, hw + c.row_pad}) : ToDevice(ctx, xv, {t, xw});
      Tensor w = ToDevice(ctx, wv, {c.d}), y = Poisoned(ctx, {t, hw});
      Tensor tt = SegmentTable(ctx, segs);
      const Segments s{segs, tt.view(), {}};
      const TensorView in = c.in_place ? x.view().Cols(0, hw) : x.view();
      const TensorView out = c.in_place ? in : y.view();
      const absl::Status st = HeadNormRope(ctx, in, c.weight ? w.view() : TensorView(), s,
                                           {rope, norm, c.in_place ? 0 : c.stride}, out);
      EXPECT_TRUE(st.ok()) << st;
      if (!c.in_place) return ToHost(ctx, out);
      // The heads out of the whole rows (downloads are contiguous); the columns past them
      // untouched.
      const std::vector<float> all = ToHost(ctx, x.view());
      std::vector<float> got(static_cast<size_t>(t * hw));
      for (int64_t r = 0; r < t; ++r) {
        std::copy_n(all.begin() + r * (hw + c.row_pad), hw, got.begin() + r * hw);
        for (int64_t j = hw; j < hw + c.row_pad; ++j) {
          EXPECT_EQ(all[r * (hw + c.row_pad) + j], -7.0f) << "row " << r << " column " << j;
        }
      }
      return got;
    };
    const std::vector<float> got = run(dev());
    if (GetParam().device == Device::kCpu) {
      EXPECT_EQ(got, ToHost(cpu(), want.view()));
    } else {
      EXPECT_TRUE(AllNear(got, ToHost(cpu(), want.view()), 1e-5, 1e-5));
    }
  }
  // Refusals, by name: a norm group other than head_dim, heads closer than head_dim, y of the
  // wrong width, y = x with a head stride, y overlapping x elsewhere.
  Tensor table = SegmentTable(dev(), segs);
  const Segments s{segs, table.view(), {}};
  Tensor x = ToDevice(dev(), RandomFloats(t * 64, 43), {t, 64});
  Tensor y = Poisoned(dev(), {t, 32});
  const RopeParams rope{2, 16, 16, 10000.0};
  auto refused = [&](const HeadNormRopeParams& p, const TensorView& out, const char* needle) {
    const absl::Status st = HeadNormRope(dev(), x.view(), TensorView(), s, p, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(needle), absl::string_view::npos) << st;
  };
  refused({rope, {1e-6f, 32, false}, 32}, y.view(), "norm group 32");
  refused({rope, {1e-6f, 16, false}, 8}, y.view(), "8 apart");
  refused({rope, {1e-6f, 16, false}, 32}, x.view().Cols(0, 32), "y may be x only in place");
  refused({rope, {1e-6f, 16, false}, 32}, x.view().Cols(0, 40), "HeadNormRope");
  refused({rope, {1e-6f, 16, false}, 32}, x.view().Cols(8, 32), "y overlaps x");
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
