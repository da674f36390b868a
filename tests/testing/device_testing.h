// Helpers for op tests parameterized over devices: the devices to run on (CPU always; CUDA when
// the build has it and a GPU is present), host ↔ device tensors, poisoned outputs, and a
// comparison that prints the first bad index and the worst error. The oracle is always the CPU
// twin on host copies.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "kernels/context.h"
#include "kernels/device_memory.h"
#include "kernels/segments.h"
#include "kernels/tensor.h"
#include "kernels/transfer.h"

namespace linfer::testing_util {

struct DeviceCase {
  std::string name;
  Device device;
  double atol, rtol;  // f32 tolerances against the CPU twin
  // ‖a − b‖₂ / ‖b‖₂ bound for paths whose products take bf16 operands (CUDA's tensor-core chunked
  // recurrence, bf16 weights or states): METHOD.md's 1e-3..1e-2 band for bf16 operands.
  double bf16_rel = 0;
};

inline void PrintTo(const DeviceCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<DeviceCase> AllDeviceCases() {
  return {{"cpu", Device::kCpu, 0, 0, 0}, {"cuda", Device::kCuda, 2e-5, 2e-4, 1e-2}};
}

inline std::string DeviceCaseName(const ::testing::TestParamInfo<DeviceCase>& info) {
  return info.param.name;
}

// Whether the case's device is missing; tests then `GTEST_SKIP() << kNoDevice;`.
inline bool DeviceMissing(const DeviceCase& c) {
  return c.device == Device::kCuda && !CudaAvailable();
}
inline constexpr char kNoDevice[] =
    "no CUDA device (or a build without CUDA): the CUDA instance is compiled in and skipped";

// An execution context with its own arena on `device`.
struct TestContext {
  explicit TestContext(Device device) : arena(device) {
    ctx.device = device;
    ctx.arena = &arena;
    ctx.transfers = &transfers;
  }
  Arena arena;
  TransferStats transfers;
  ExecContext ctx;
};

// Random normal floats (seeded).
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A device tensor holding `values` (dtype and shape given).
template <typename T>
Tensor ToDevice(const ExecContext& ctx, const std::vector<T>& values, DType dtype, Shape shape) {
  absl::StatusOr<Tensor> t = Tensor::Empty(dtype, shape, ctx.device);
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nbytes(), values.size() * sizeof(T));
  EXPECT_TRUE(Upload(ctx, values.data(), t->view()).ok());
  EXPECT_TRUE(Synchronize(ctx).ok());
  return *std::move(t);
}

inline Tensor ToDevice(const ExecContext& ctx, const std::vector<float>& values, Shape shape) {
  return ToDevice(ctx, values, DType::kF32, std::move(shape));
}

// A step's segment table on the device (I64 [segments, 4]).
inline Tensor SegmentTable(const ExecContext& ctx, absl::Span<const Segment> segs) {
  return ToDevice(ctx, std::vector<Segment>(segs.begin(), segs.end()), DType::kI64,
                  {static_cast<int64_t>(segs.size()), 4});
}

// A device f32 tensor of `shape` filled with NaN (an op must overwrite what it claims to).
inline Tensor Poisoned(const ExecContext& ctx, Shape shape) {
  std::vector<float> nan(static_cast<size_t>(NumElements(shape)),
                         std::numeric_limits<float>::quiet_NaN());
  return ToDevice(ctx, nan, std::move(shape));
}

inline std::vector<float> ToHost(const ExecContext& ctx, const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(Download(ctx, t, out.data()).ok());
  EXPECT_TRUE(Synchronize(ctx).ok());
  return out;
}

// |a − b| ≤ atol + rtol·|b| everywhere (NaN fails); reports the first bad index and the worst.
inline ::testing::AssertionResult AllNear(const std::vector<float>& a, const std::vector<float>& b,
                                          double atol, double rtol) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  size_t first = a.size(), worst_i = 0;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(double(a[i]) - b[i]);
    const bool bad = !(err <= atol + rtol * std::abs(double(b[i])));
    if (bad && first == a.size()) first = i;
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (first == a.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "first mismatch at " << first << ": " << a[first] << " vs " << b[first]
         << "; worst |error| " << worst << " at " << worst_i << " (" << a[worst_i] << " vs "
         << b[worst_i] << ")";
}

// ‖a − b‖₂ / ‖b‖₂ ≤ rel (NaN fails); reports the relative error and the worst element.
inline ::testing::AssertionResult RelNear(const std::vector<float>& a, const std::vector<float>& b,
                                          double rel) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  double err = 0, ref = 0, worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    err += d * d;
    ref += double(b[i]) * b[i];
    if (!(std::abs(d) <= worst)) {
      worst = std::isnan(d) ? INFINITY : std::abs(d);
      worst_i = i;
    }
  }
  const double r = std::sqrt(err) / std::max(std::sqrt(ref), 1e-30);
  if (r <= rel) return ::testing::AssertionSuccess() << "relative error " << r;
  return ::testing::AssertionFailure()
         << "relative error " << r << " > " << rel << "; worst |error| " << worst << " at "
         << worst_i << " (" << a[worst_i] << " vs " << b[worst_i] << ")";
}

// Values rounded to bf16 and back (what a bf16 tensor holds), and their bf16 bits.
inline std::vector<float> RoundToBf16(std::vector<float> v) {
  for (float& x : v) x = Bf16ToF32(F32ToBf16(x));
  return v;
}
inline std::vector<uint16_t> Bf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}
// A device tensor's elements as floats (f32 or bf16 storage).
inline std::vector<float> ToHostFloats(const ExecContext& ctx, const TensorView& t) {
  if (t.dtype() != DType::kBF16) return ToHost(ctx, t);
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(Download(ctx, t, bits.data()).ok());
  EXPECT_TRUE(Synchronize(ctx).ok());
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}
template <typename T>
std::vector<T> ToHostAs(const ExecContext& ctx, const TensorView& t) {
  std::vector<T> out(static_cast<size_t>(t.nbytes() / sizeof(T)));
  EXPECT_TRUE(Download(ctx, t, out.data()).ok());
  EXPECT_TRUE(Synchronize(ctx).ok());
  return out;
}

}  // namespace linfer::testing_util
