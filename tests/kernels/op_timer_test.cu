// OpTimer on CUDA (kernels/op_timer.h): a window times each launch alone, by its CheckLaunch
// name, with the host's gaps between launches left out (the gate holds the stream until Close);
// a host wait inside a window opens the gate instead of deadlocking; cuBLASLt products are
// labelled with their shape; a capturing stream and a second window are refused; a window
// without a gate times every launch with the host's gaps. Kernels spin
// on the GPU's clock for a set time, so each launch's time has a floor the test knows, and the
// host sleeps between launches far longer than any of them: a timer that counted the host's gaps
// would show them. The CPU side (Create refused) is in tests/engine/engine_test.cc.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/device_context.h"
#include "kernels/gemm.h"
#include "kernels/op_timer.h"
#include "tests/testing/device_testing.h"

namespace linfer::cuda {
namespace {

__global__ void SpinKernel(long long ns) {
  PdlEnter();
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (static_cast<long long>(t - t0) < ns);
}

void Spin(const ExecContext& ctx, long long ns, const char* label) {
  LaunchKernel(SpinKernel, 1, 32, 0, Stream(ctx), ns);
  ASSERT_TRUE(CheckLaunch(label).ok());
}

const OpTime* Find(const OpTimes& t, const std::string& label) {
  for (const OpTime& op : t.ops) {
    if (op.label == label) return &op;
  }
  return nullptr;
}

struct Fixture {
  std::unique_ptr<DeviceContext> device;
  std::unique_ptr<OpTimer> timer;
};

Fixture Make() {
  Fixture f;
  absl::StatusOr<std::unique_ptr<DeviceContext>> d = DeviceContext::Create({Device::kCuda});
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) f.device = *std::move(d);
  absl::StatusOr<std::unique_ptr<OpTimer>> t = OpTimer::Create(Device::kCuda);
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) f.timer = *std::move(t);
  return f;
}

constexpr long long kSlowNs = 300'000, kFastNs = 20'000;  // 0.3 ms, 20 µs
constexpr auto kHostGap = std::chrono::milliseconds(5);

TEST(OpTimerTest, TimesEachLaunchAloneWithoutTheHostsGaps) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  for (int window = 0; window < 2; ++window) {
    ASSERT_TRUE(f.timer->Open(ctx).ok());
    Spin(ctx, kFastNs, "First");  // before the gate: untimed
    for (int i = 0; i < 2; ++i) {
      Spin(ctx, kSlowNs, "Slow");
      std::this_thread::sleep_for(kHostGap);
    }
    for (int i = 0; i < 3; ++i) {
      Spin(ctx, kFastNs, "Fast");
      std::this_thread::sleep_for(kHostGap);
    }
    ASSERT_TRUE(f.timer->Close().ok());
  }
  const OpTimes t = f.timer->Totals();
  EXPECT_EQ(t.windows, 2);
  EXPECT_EQ(t.untimed, 2);
  EXPECT_EQ(t.host_paced, 0);
  EXPECT_EQ(t.timeouts, 0);
  EXPECT_EQ(Find(t, "First"), nullptr);
  const OpTime* slow = Find(t, "Slow");
  const OpTime* fast = Find(t, "Fast");
  ASSERT_NE(slow, nullptr);
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(slow->launches, 4);
  EXPECT_EQ(fast->launches, 6);
  // Each launch takes at least its spin; the host's 5-ms gaps (50 ms in all) are not in them.
  EXPECT_GE(slow->ms, 4 * kSlowNs * 1e-6 * 0.99);
  EXPECT_GE(fast->ms, 6 * kFastNs * 1e-6 * 0.99);
  EXPECT_LT(slow->ms + fast->ms, 10 * 5.0 / 2) << "the host's gaps were timed";
  ASSERT_EQ(t.ops.size(), 2u);
  EXPECT_EQ(t.ops[0].label, "Slow") << "largest first";
  EXPECT_NEAR(t.ms, slow->ms + fast->ms, 1e-9);
  EXPECT_EQ(t.launches, 10);
  f.timer->Reset();
  EXPECT_EQ(f.timer->Totals().windows, 0);
  EXPECT_TRUE(f.timer->Totals().ops.empty());
}

// Gate::kNone: no gate kernel; event 0 at Open, so the first launch is timed too, and every
// launch counts as host-paced: with the host sleeping between launches far longer than the
// kernels run, the gaps are in the times (what the gate exists to leave out).
TEST(OpTimerTest, AWindowWithoutAGateTimesEveryLaunchAsTheHostQueuesIt) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  ASSERT_TRUE(f.timer->Open(ctx, OpTimer::Gate::kNone).ok());
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(kHostGap);
    Spin(ctx, kFastNs, "Fast");
  }
  Tensor buf = testing_util::ToDevice(ctx, std::vector<float>(16, 2.0f), {16});
  std::vector<float> host(16);
  ASSERT_TRUE(linfer::Download(ctx, buf.view(), host.data()).ok());  // no gate to open
  EXPECT_EQ(host[5], 2.0f);
  Spin(ctx, kSlowNs, "Slow");
  ASSERT_TRUE(f.timer->Close().ok());
  const OpTimes t = f.timer->Totals();
  EXPECT_EQ(t.windows, 1);
  EXPECT_EQ(t.untimed, 0);
  EXPECT_EQ(t.timeouts, 0);
  EXPECT_EQ(t.host_paced, 5);
  const OpTime* fast = Find(t, "Fast");
  const OpTime* slow = Find(t, "Slow");
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(fast->launches, 4);
  EXPECT_EQ(slow->launches, 1);
  EXPECT_GE(slow->ms, kSlowNs * 1e-6 * 0.99);
  EXPECT_GE(fast->ms, 4 * 5.0 * 0.9)
      << "each launch followed a 5-ms host gap, timed without a gate";
  // A gated window after it works as before (the ungated one left no gate state behind).
  ASSERT_TRUE(f.timer->Open(ctx).ok());
  Spin(ctx, kFastNs, "First");
  Spin(ctx, kSlowNs, "Slow");
  ASSERT_TRUE(f.timer->Close().ok());
  const OpTimes u = f.timer->Totals();
  EXPECT_EQ(u.windows, 2);
  EXPECT_EQ(u.untimed, 1);
  EXPECT_EQ(u.host_paced, 5);
  EXPECT_EQ(Find(u, "Slow")->launches, 2);
}

TEST(OpTimerTest, AHostWaitInAWindowOpensTheGate) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  Tensor buf = testing_util::ToDevice(ctx, std::vector<float>(16, 1.0f), {16});
  std::vector<float> host(16);
  ASSERT_TRUE(f.timer->Open(ctx).ok());
  Spin(ctx, kFastNs, "First");
  Spin(ctx, kSlowNs, "Slow");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(linfer::Download(ctx, buf.view(), host.data()).ok());  // waits for the stream
  ASSERT_TRUE(linfer::Synchronize(ctx).ok());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 1.0) << "the download waited for the gate's timeout";
  EXPECT_EQ(host[3], 1.0f);
  Spin(ctx, kFastNs, "Fast");  // after the gate opened: host-paced
  ASSERT_TRUE(f.timer->Close().ok());
  const OpTimes t = f.timer->Totals();
  EXPECT_EQ(t.timeouts, 0);
  EXPECT_EQ(t.host_paced, 1);
  ASSERT_NE(Find(t, "Slow"), nullptr);
  EXPECT_GE(Find(t, "Slow")->ms, kSlowNs * 1e-6 * 0.99);
}

TEST(OpTimerTest, LabelsCublasLtProductsWithTheirShape) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  if (Bf16MatmulInputs()) GTEST_SKIP() << "LINFER_CUDA_BF16_INPUTS changes the labelled product";
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  const int64_t m = 4, n = 64, k = 128;
  Tensor x = testing_util::ToDevice(ctx, std::vector<float>(m * k, 0.5f), {m, k});
  Tensor w = testing_util::ToDevice(ctx, std::vector<float>(n * k, 0.25f), {n, k});
  absl::StatusOr<Tensor> y = Tensor::Empty(DType::kF32, {m, n}, Device::kCuda);
  ASSERT_TRUE(y.ok());
  // Once before the window: CUDA loads a kernel at its first launch, which may synchronize.
  ASSERT_TRUE(linfer::Linear(ctx, x.view(), w.view(), y->view()).ok());
  ASSERT_TRUE(f.timer->Open(ctx).ok());
  Spin(ctx, kFastNs, "First");
  ASSERT_TRUE(linfer::Linear(ctx, x.view(), w.view(), y->view()).ok());
  ASSERT_TRUE(f.timer->Close().ok());
  const OpTimes t = f.timer->Totals();
  EXPECT_EQ(t.timeouts, 0);
  bool labelled = false;
  for (const OpTime& op : t.ops) {
    // With LINFER_CUDA_GEMV=1 a few-row product is the GEMV kernel instead.
    labelled |= op.label == "cublasLt 4x64x128 f32" || op.label == "GemvKernel";
  }
  EXPECT_TRUE(labelled) << (t.ops.empty() ? "no op" : t.ops[0].label);
}

// More launches than the queue may hold behind a closed gate: the gate opens at kMaxQueued
// entries and the rest are timed host-paced — no host blocked behind it, no timeout.
TEST(OpTimerTest, OpensTheGateBeforeTheQueueFills) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  const int launches = OpTimer::kMaxQueued;  // 2 entries each: twice the cap
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.timer->Open(ctx).ok());
  Spin(ctx, kFastNs, "First");
  for (int i = 0; i < launches; ++i) Spin(ctx, 1000, "Tiny");
  ASSERT_TRUE(f.timer->Close().ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  const OpTimes t = f.timer->Totals();
  EXPECT_EQ(t.timeouts, 0);
  ASSERT_NE(Find(t, "Tiny"), nullptr);
  EXPECT_EQ(Find(t, "Tiny")->launches, launches);
  EXPECT_EQ(t.host_paced, launches - OpTimer::kMaxQueued / 2);
}

TEST(OpTimerTest, RefusesASecondWindowAndACapturingStream) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  Fixture f = Make();
  ASSERT_NE(f.timer, nullptr);
  const ExecContext& ctx = f.device->exec();
  ASSERT_TRUE(f.timer->Open(ctx).ok());
  const absl::Status second = f.timer->Open(ctx);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  ASSERT_TRUE(f.timer->Close().ok());
  EXPECT_EQ(f.timer->Close().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.device->BeginCapture().ok());
  const absl::Status capturing = f.timer->Open(ctx);
  EXPECT_EQ(capturing.code(), absl::StatusCode::kFailedPrecondition) << capturing;
  EXPECT_NE(capturing.message().find("graph"), absl::string_view::npos) << capturing;
  (void)f.device->EndCapture();  // an empty graph; only the capture must end
}

}  // namespace
}  // namespace linfer::cuda
