// The fused and batched ops on every device against their CPU twins and the unfused ops they
// replace: Mul with an activation (= Activate then Mul), AddRmsNorm (= Add then RmsNorm),
// ZeroTensors (= ZeroTensor per view), ShortConvs (= ShortConv per group). Only the CPU instance
// runs without a GPU; there the device-vs-CPU checks compare the CPU with itself, and each test
// also checks values computed by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/activation.h"
#include "kernels/device_memory.h"
#include "kernels/norm.h"
#include "kernels/short_conv.h"
#include "kernels/transfer.h"
#include "tests/kernels/device_ops_fixture.h"

namespace linfer {
namespace {

using testing_util::Poisoned;
using testing_util::RaggedSegments;
using testing_util::RandomFloats;
using testing_util::SegmentTable;
using testing_util::ToDevice;
using testing_util::ToHost;

class DeviceFusedOpsTest : public testing_util::DeviceOpsTest {
 protected:
  // ShortConvs against ShortConv per group over `segs` (ShortConvGroupsEqualOneConvPerGroup).
  void ConvGroupsCase(const std::vector<Segment>& segs);
};

// Mul with an activation on b (Qwen3.5 attention's o ⊙ σ(gate)): on each device bit-identical to
// Activate then Mul, over a strided b as the attention passes it, in place; the device's within
// tolerance of the CPU twin; by hand at one element.
TEST_P(DeviceFusedOpsTest, MulWithActivationEqualsActivateThenMul) {
  const int64_t rows = 24, cols = 64;
  const std::vector<float> av = RandomFloats(rows * cols, 61, 2.0f);
  const std::vector<float> bv = RandomFloats(rows * 2 * cols, 62, 4.0f);
  for (Activation act : {Activation::kSigmoid, Activation::kSilu, Activation::kIdentity}) {
    auto run = [&](const ExecContext& c, bool fused) {
      Tensor a = ToDevice(c, av, {rows, cols}), b = ToDevice(c, bv, {rows, 2 * cols});
      const TensorView gate = b.view().Cols(cols, cols);  // row stride 2·cols
      if (fused) {
        EXPECT_TRUE(Mul(c, a.view(), gate, a.view(), act).ok());
      } else {
        EXPECT_TRUE(Activate(c, act, gate, gate).ok());
        EXPECT_TRUE(Mul(c, a.view(), gate, a.view()).ok());
      }
      return ToHost(c, a.view());
    };
    const std::vector<float> fused = run(dev(), true);
    EXPECT_EQ(fused, run(dev(), false)) << static_cast<int>(act);
    EXPECT_TRUE(Near(fused, run(cpu(), true))) << static_cast<int>(act);
    const float b0 = bv[cols];  // row 0's first gate value
    EXPECT_NEAR(fused[0], av[0] * linfer::Activate(act, b0), 1e-5 * (1 + std::abs(av[0])));
  }
}

// AddRmsNorm: on each device bit-identical to Add then RmsNorm (the sum written back to h, the norm
// of it in y), and the device's within tolerance of the CPU twin; head-wide, 2000 and 2048 columns
// (the block-per-row kernel); a mismatched residual is refused by name.
TEST_P(DeviceFusedOpsTest, AddRmsNormEqualsAddThenRmsNorm) {
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
TEST_P(DeviceFusedOpsTest, ZeroTensorsZeroEveryViewAndNothingElse) {
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

// CopyTensors: each destination gets its source and nothing else changes — unaligned rows, an
// aligned row with a tail over 256 KB, a strided pair (the driver's 2-D copy), a view onto itself,
// more pairs than one launch takes — equal to CopyTensor of each on the CPU; mismatched and
// overlapping pairs are refused by name, and so is a CopyTensor onto part of its source.
TEST_P(DeviceFusedOpsTest, CopyTensorsEqualACopyPerPair) {
  const std::vector<float> av = RandomFloats(4 * 3, 71), bv = RandomFloats(300 * 8, 72);
  const std::vector<float> cv = RandomFloats(6 * 10, 73), dv = RandomFloats(4 * 70001, 74);
  auto run = [&](const ExecContext& c) {
    Tensor a = ToDevice(c, av, {4, 3}), b = ToDevice(c, bv, {300, 8});
    Tensor m = ToDevice(c, cv, {6, 10}), d = ToDevice(c, dv, {4, 70001});
    std::vector<TensorView> srcs = {a.view().Rows(1, 1), m.view().Cols(2, 5).Rows(0, 2),
                                    d.view().Rows(0, 1), d.view().Rows(1, 1), a.view().Rows(2, 1)};
    std::vector<TensorView> dsts = {a.view().Rows(3, 1), m.view().Cols(5, 5).Rows(3, 2),
                                    d.view().Rows(2, 1), d.view().Rows(3, 1), a.view().Rows(2, 1)};
    for (int r = 0; r < 150; ++r) {  // > kMaxZeroRanges pairs: odd rows of b ← even rows
      srcs.push_back(b.view().Rows(2 * r, 1));
      dsts.push_back(b.view().Rows(2 * r + 1, 1));
    }
    EXPECT_TRUE(CopyTensors(c, srcs, dsts).ok());
    std::vector<float> out;
    for (const Tensor* t : {&a, &b, &m, &d}) {
      const std::vector<float> host = ToHost(c, t->view());
      out.insert(out.end(), host.begin(), host.end());
    }
    // Refusals: a pair of different shapes, and lists of different lengths.
    const absl::Status shapes = CopyTensors(c, {a.view().Rows(0, 1)}, {b.view().Rows(0, 1)});
    EXPECT_EQ(shapes.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(shapes.message().find("dst 0"), std::string::npos) << shapes;
    EXPECT_FALSE(CopyTensors(c, {a.view()}, {}).ok());
    // A pair that overlaps itself, and a chain (one pair's destination is another's source: in
    // order on the CPU, a race on CUDA).
    const absl::Status self = CopyTensors(c, {a.view().Rows(0, 2)}, {a.view().Rows(1, 2)});
    EXPECT_EQ(self.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(self.message().find("src 0 and dst 0 overlap"), std::string::npos) << self;
    const absl::Status single = CopyTensor(c, a.view().Rows(0, 2), a.view().Rows(1, 2));
    EXPECT_EQ(single.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(single.message().find("CopyTensor: src"), std::string::npos) << single;
    const absl::Status chain = CopyTensors(c, {a.view().Rows(0, 1), a.view().Rows(1, 1)},
                                           {a.view().Rows(1, 1), a.view().Rows(2, 1)});
    EXPECT_EQ(chain.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(chain.message().find("dst 0 overlaps pair 1"), std::string::npos) << chain;
    // Rank 3: rows of 4 × 4 elements, half of one over half of the next.
    Tensor cube = ToDevice(c, RandomFloats(2 * 4 * 4, 75), {2, 4, 4});
    const TensorView shifted = cube.view().Reshaped({8, 4}).Rows(2, 4).Reshaped({1, 4, 4});
    const absl::Status deep = CopyTensors(c, {cube.view().Rows(0, 1)}, {shifted});
    EXPECT_NE(deep.message().find("src 0 and dst 0 overlap"), std::string::npos) << deep;
    return out;
  };
  const std::vector<float> want = run(cpu());
  EXPECT_EQ(run(dev()), want);
  // The CPU twin itself: a's row 3 is its row 1, b's odd rows its even ones, m's block moved.
  const size_t b0 = 12, m0 = b0 + 2400, d0 = m0 + 60;
  EXPECT_EQ(want[9], av[3]);
  EXPECT_EQ(want[6], av[6]);
  EXPECT_EQ(want[b0 + 8 + 5], bv[5]);
  EXPECT_EQ(want[b0 + 16 + 5], bv[16 + 5]);
  EXPECT_EQ(want[m0 + 30 + 5], cv[2]);
  EXPECT_EQ(want[d0 + 2 * 70001 + 70000], dv[70000]);
}

// DownloadGathered: views back to back in host memory, equal to a Download of each — 16-byte
// aligned rows with and without a tail, unaligned ones, more views than one gather launch takes —
// with a stager of 4 buffers (on CUDA: staged through the device and copied on the stager's
// stream) and without. The copies read the views in stream order: zeroing them right after the
// calls (before waiting) does not reach the host. Six copies at once: the first 4 in flight, the
// rest in flight too if a buffer's copy has run by then, else done at once. A buffer comes back
// when its copy has run, waited for or not: with 4 copies held and never waited, a fifth gets one
// (CUDA). A strided view is refused by name.
TEST_P(DeviceFusedOpsTest, DownloadGatheredEqualsADownloadPerView) {
  const std::vector<float> av = RandomFloats(4 * 3, 71), bv = RandomFloats(300 * 8, 72);
  const std::vector<float> dv = RandomFloats(3 * 70001, 73);
  Tensor a = ToDevice(dev(), av, {4, 3}), b = ToDevice(dev(), bv, {300, 8});
  Tensor d = ToDevice(dev(), dv, {3, 70001});
  // d's row 0 (aligned, a 4-byte tail), then b's rows (aligned: 32 bytes each, at offsets that
  // stay multiples of 16 until d's row 1), d's row 1 and a's rows (unaligned).
  std::vector<TensorView> views = {d.view().Rows(0, 1)};
  for (int r = 0; r < 300; r += 2) views.push_back(b.view().Rows(r, 1));  // > 64 ranges
  for (const TensorView& v :
       {d.view().Rows(1, 1), a.view().Rows(1, 1), a.view().Rows(3, 1), a.view().Rows(0, 1)}) {
    views.push_back(v);
  }
  std::vector<float> want;
  for (const TensorView& v : views) {
    const std::vector<float> host = ToHost(dev(), v);
    want.insert(want.end(), host.begin(), host.end());
  }
  const size_t bytes = want.size() * sizeof(float);
  setenv("LINFER_CUDA_ASYNC_SNAPSHOTS", "1", 1);  // read when a stager is made
  absl::StatusOr<std::shared_ptr<DownloadStager>> staged =
      MakeDownloadStager(dev().device, bytes, 4);
  unsetenv("LINFER_CUDA_ASYNC_SNAPSHOTS");
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(*staged == nullptr, dev().device == Device::kCpu);
  for (const std::shared_ptr<DownloadStager>& stager :
       {*staged, std::shared_ptr<DownloadStager>()}) {
    SCOPED_TRACE(stager != nullptr ? "stager" : "none");
    ASSERT_TRUE(Upload(dev(), dv.data(), d.view()).ok());  // the zeroed views back
    ASSERT_TRUE(Upload(dev(), bv.data(), b.view()).ok());
    ASSERT_TRUE(Upload(dev(), av.data(), a.view()).ok());
    // Pinned destinations, as the engine's host states are (the copy engine's path).
    std::vector<std::unique_ptr<float, std::function<void(float*)>>> got;
    for (int i = 0; i < 6; ++i) {
      absl::StatusOr<void*> p = AllocatePinnedHostMemory(dev().device, bytes);
      ASSERT_TRUE(p.ok()) << p.status();
      got.emplace_back(static_cast<float*>(*p),
                       [this](float* f) { FreePinnedHostMemory(dev().device, f); });
      std::fill(got.back().get(), got.back().get() + want.size(), -1.0f);
    }
    std::vector<std::shared_ptr<PendingCopy>> pending;
    for (auto& g : got) {
      absl::StatusOr<std::shared_ptr<PendingCopy>> p =
          DownloadGathered(dev(), views, g.get(), stager);
      ASSERT_TRUE(p.ok()) << p.status();
      pending.push_back(*p);
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      if (stager == nullptr || i < 4) {
        EXPECT_EQ(pending[i] != nullptr, stager != nullptr) << "copy " << i;
      }
    }
    ASSERT_TRUE(ZeroTensors(dev(), views).ok());
    for (size_t i = 0; i < got.size(); ++i) {
      if (pending[i] != nullptr) {
        ASSERT_TRUE(pending[i]->Wait().ok());
      }
      EXPECT_EQ(std::vector<float>(got[i].get(), got[i].get() + want.size()), want) << "copy " << i;
    }
    pending.clear();                              // before the destinations go
    EXPECT_EQ(ToHost(dev(), views[0])[0], 0.0f);  // the zeroing did run, after the copies
    if (stager == nullptr) continue;
    // Every buffer taken by copies nobody waits for; one comes back once its copy has run.
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<std::shared_ptr<PendingCopy>> p =
          DownloadGathered(dev(), views, got[i].get(), stager);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_NE(*p, nullptr) << "copy " << i << ": every earlier buffer has come back";
      pending.push_back(*p);
    }
    bool reclaimed = false;
    for (int tries = 0; tries < 200 && !reclaimed; ++tries) {
      absl::StatusOr<std::shared_ptr<PendingCopy>> p =
          DownloadGathered(dev(), views, got[4].get(), stager);
      ASSERT_TRUE(p.ok()) << p.status();
      reclaimed = *p != nullptr;
      if (reclaimed) {
        ASSERT_TRUE((*p)->Wait().ok());
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    EXPECT_TRUE(reclaimed) << "no buffer came back in 2 s with 4 copies held unwaited";
    EXPECT_EQ(std::vector<float>(got[4].get(), got[4].get() + want.size()),
              std::vector<float>(want.size(), 0.0f))
        << "the fifth copy read the zeroed views";
    pending.clear();
  }
  Tensor m = ToDevice(dev(), RandomFloats(6 * 10, 74), {6, 10});
  float sink[30];
  const std::vector<TensorView> strided = {m.view().Cols(2, 5)};
  const absl::StatusOr<std::shared_ptr<PendingCopy>> bad =
      DownloadGathered(dev(), strided, sink, nullptr);
  EXPECT_THAT(std::string(bad.status().message()), testing::HasSubstr("DownloadGathered"));
}

// ShortConvs: three groups of different widths and channel counts (one over a 128-channel block,
// inputs as column views of one projection, outputs side by side in one tensor) in one call equal
// three ShortConv calls on the CPU, outputs and states; prefill-long and decode segments.
TEST_P(DeviceFusedOpsTest, ShortConvGroupsEqualOneConvPerGroup) {
  std::vector<Segment> decode;  // one token each: the kernel rewrites the states itself
  for (int i = 0; i < 5; ++i) decode.push_back({i, 1, 9, (7 * i + 3) % 32});
  for (const std::vector<Segment>& segs : {RaggedSegments(), decode}) {
    ConvGroupsCase(segs);
  }
}

void DeviceFusedOpsTest::ConvGroupsCase(const std::vector<Segment>& segs) {
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

TEST_P(DeviceFusedOpsTest, ShortConvGroupsRefuseBadGroups) {
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

INSTANTIATE_TEST_SUITE_P(Devices, DeviceFusedOpsTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
