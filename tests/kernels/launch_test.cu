// LaunchKernel and PdlEnter (kernels/cuda/launch.cuh). Everywhere: a failed launch reaches the
// CheckLaunch after it, once. On a GPU: kernels launched through LaunchKernel see the writes of
// those before them and do not overwrite what those still read, across a kernel whose blocks all
// return at once (the guarantee carries down the chain), with a slow first kernel so that an
// early launch would show. tests/gpu/run_on_gpu.sh reruns every CUDA test with LINFER_CUDA_PDL=on,
// where these launches carry the programmatic-dependent-launch attribute.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/device_memory.h"
#include "tests/testing/device_testing.h"

namespace linfer::cuda {
namespace {

__global__ void NoopKernel() { PdlEnter(); }

// a[i] = i + 1, each block after spinning ≈ `cycles` clock cycles.
__global__ void SlowWriteKernel(int* a, int n, long long cycles) {
  PdlEnter();
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i + 1;
}

__global__ void ReturnAtOnceKernel() { PdlEnter(); }

__global__ void CopyPlusKernel(const int* a, int* b, int n) {  // b = a + 1000
  PdlEnter();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + 1000;
}

__global__ void OverwriteKernel(int* a, int n, int value) {
  PdlEnter();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = value;
}

TEST(LaunchKernelTest, AFailedLaunchIsReportedByTheNextCheckOnce) {
  // 4,096 threads a block: beyond every device's limit (and without a device, no launch at all).
  LaunchKernel(NoopKernel, 1, 4096, 0, nullptr);
  const absl::Status first = CheckLaunch("NoopKernel");
  EXPECT_FALSE(first.ok());
  EXPECT_NE(first.message().find("NoopKernel"), absl::string_view::npos) << first;
  // Without a device the runtime's failed initialisation is every call's error; on one, a bad
  // configuration is reported once and the next launch starts clean.
  if (!CudaAvailable()) return;
  EXPECT_TRUE(CheckLaunch("NoopKernel").ok()) << "the error was reported once";
  LaunchKernel(NoopKernel, 1, 32, 0, nullptr);
  EXPECT_TRUE(CheckLaunch("NoopKernel").ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(LaunchKernelTest, DependentKernelsSeeEarlierWritesAndKeepLaterOnesOut) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  constexpr int kN = 1 << 16, kThreads = 256, kBlocks = kN / kThreads;
  int *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, kN * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kN * sizeof(int)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> hb(kN), ha(kN);
  for (long long cycles : {0LL, 20000LL, 200000LL}) {
    ASSERT_EQ(cudaMemsetAsync(b, 0, kN * sizeof(int), stream), cudaSuccess);
    LaunchKernel(SlowWriteKernel, kBlocks, kThreads, 0, stream, a, kN, cycles);
    ASSERT_TRUE(CheckLaunch("SlowWriteKernel").ok());
    LaunchKernel(ReturnAtOnceKernel, kBlocks, kThreads, 0, stream);
    ASSERT_TRUE(CheckLaunch("ReturnAtOnceKernel").ok());
    LaunchKernel(CopyPlusKernel, kBlocks, kThreads, 0, stream, a, b, kN);  // reads a: RAW
    ASSERT_TRUE(CheckLaunch("CopyPlusKernel").ok());
    LaunchKernel(OverwriteKernel, kBlocks, kThreads, 0, stream, a, kN, -7);  // writes a: WAR
    ASSERT_TRUE(CheckLaunch("OverwriteKernel").ok());
    ASSERT_EQ(cudaMemcpyAsync(hb.data(), b, kN * sizeof(int), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(ha.data(), a, kN * sizeof(int), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    int wrong_b = 0, wrong_a = 0;
    for (int i = 0; i < kN; ++i) {
      wrong_b += hb[i] != i + 1 + 1000;
      wrong_a += ha[i] != -7;
    }
    EXPECT_EQ(wrong_b, 0) << "cycles " << cycles << ": b[0] = " << hb[0] << ", PDL "
                          << PdlEnabled();
    EXPECT_EQ(wrong_a, 0) << "cycles " << cycles;
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

}  // namespace
}  // namespace linfer::cuda
