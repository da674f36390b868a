// The fixture of the device-parameterized op tests (device_ops_test.cc, device_fused_ops_test.cc,
// device_linear_test.cc, device_recurrence_test.cc):
// a context on the case's device (the CUDA instance skips without a GPU) and one on the CPU, the
// case's tolerances, and the ragged segment layout those tests share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/segments.h"
#include "tests/testing/device_testing.h"

namespace linfer::testing_util {

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
  std::unique_ptr<TestContext> dev_;
  TestContext cpu_{Device::kCpu};
};

// Ragged segments over non-contiguous slots: {1, 2, 63, 64, 65, 200} tokens in slots
// {7, 2, 30, 0, 11, 5} of a 32-slot state.
inline std::vector<Segment> RaggedSegments() {
  const int64_t lens[] = {1, 2, 63, 64, 65, 200}, slots[] = {7, 2, 30, 0, 11, 5};
  std::vector<Segment> segs;
  int64_t row = 0;
  for (int i = 0; i < 6; ++i) {
    segs.push_back({row, lens[i], 3 * i, slots[i]});
    row += lens[i];
  }
  return segs;
}

}  // namespace linfer::testing_util
