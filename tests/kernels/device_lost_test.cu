// A sticky CUDA error is a lost device (kernels/device_lost.h): everywhere, each code that
// driver_types.h says leaves the process unable to use CUDA again becomes a status IsDeviceLost
// recognises, and the others do not; on a GPU, a kernel's illegal memory access, reported by the
// next synchronisation of the stream (the engine's check after a failed step) and by every CUDA
// call after it. That part runs in a child process (a death test, re-executed: the error ends the
// process's CUDA context), so it is named outside tests/gpu/run_on_gpu.sh's CUDA filter — its
// deliberate bad access must not count as a compute-sanitizer finding.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/device_context.h"
#include "kernels/device_lost.h"
#include "kernels/device_memory.h"
#include "kernels/transfer.h"
#include "tests/testing/device_testing.h"

namespace linfer::cuda {
namespace {

TEST(CudaDeviceLostTest, TheStickyCodesAndOnlyThoseAreALostDevice) {
  for (cudaError_t err :
       {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert, cudaErrorECCUncorrectable,
        cudaErrorIllegalInstruction, cudaErrorMisalignedAddress, cudaErrorHardwareStackError}) {
    const absl::Status st = CudaStatus(err, "a call", __FILE__, __LINE__);
    EXPECT_TRUE(IsDeviceLost(st)) << st;
    EXPECT_NE(st.message().find(cudaGetErrorName(err)), absl::string_view::npos) << st;
  }
  for (cudaError_t err : {cudaErrorMemoryAllocation, cudaErrorInvalidValue,
                          cudaErrorLaunchOutOfResources, cudaErrorNoDevice, cudaErrorNotReady}) {
    EXPECT_FALSE(IsDeviceLost(CudaStatus(err, "a call", __FILE__, __LINE__))) << err;
  }
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "a call", __FILE__, __LINE__).code(),
            absl::StatusCode::kResourceExhausted);
}

__global__ void WildStoreKernel(int* p) {
  PdlEnter();
  *p = 1;
}

// The child's checks; its exit status 0 says they all held (each failure prints why).
int IllegalAccessIsALostDevice() {
  DeviceContextOptions options;
  options.device = Device::kCuda;
  absl::StatusOr<std::unique_ptr<DeviceContext>> device = DeviceContext::Create(options);
  if (!device.ok()) {
    std::fprintf(stderr, "DeviceContext: %s\n", device.status().ToString().c_str());
    return 2;
  }
  int* wild = reinterpret_cast<int*>(uintptr_t{16});  // never a device allocation
  LaunchKernel(WildStoreKernel, 1, 1, 0, static_cast<cudaStream_t>((*device)->exec().stream), wild);
  (void)CheckLaunch("WildStoreKernel");  // the launch itself succeeds; its fault comes later
  const absl::Status synced = Synchronize((*device)->exec());
  std::fprintf(stderr, "synchronize: %s\n", synced.ToString().c_str());
  if (!IsDeviceLost(synced)) return 3;
  void* p = nullptr;
  const cudaError_t later = cudaMalloc(&p, 256);
  const absl::Status again = CudaStatus(later, "cudaMalloc", __FILE__, __LINE__);
  std::fprintf(stderr, "a later call: %s\n", again.ToString().c_str());
  if (later == cudaSuccess || !IsDeviceLost(again)) return 4;
  return 0;
}

TEST(CudaDeviceLostTest, AnIllegalAccessIsALostDeviceForEveryLaterCall) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: fork after CUDA is unsafe
  EXPECT_EXIT(_exit(IllegalAccessIsALostDevice()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace linfer::cuda
