// LaunchKernel and PdlEnter (kernels/cuda/launch.cuh). Everywhere: a failed launch reaches the
// CheckLaunch after it, once. On a GPU, with a slow first kernel so that an early launch would
// show: a kernel sees the writes of the one before it (RAW), a kernel two launches back has
// finished too (the order carries through a kernel whose blocks only wait), and a writer does not
// overwrite what a slow reader before it still reads (WAR). A kernel that breaks the rule (no
// PdlEnter) shows the mechanism at work: with LINFER_CUDA_PDL=on it runs before the slow kernel's
// writes land, in a stream and in a CUDA graph; without PDL it runs after them.
// tests/gpu/run_on_gpu.sh reruns every CUDA test with LINFER_CUDA_PDL=on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/device_memory.h"
#include "tests/testing/device_testing.h"

namespace linfer::cuda {
namespace {

constexpr int kN = 1 << 16, kThreads = 256, kBlocks = kN / kThreads;
// ≈ 1 ms at an H200's clocks: far longer than a launch.
constexpr long long kSlow = 2'000'000;

__device__ void Spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void NoopKernel() { PdlEnter(); }

// a[i] = i + 1, each block after spinning ≈ `cycles` clock cycles.
__global__ void SlowWriteKernel(int* a, int n, long long cycles) {
  PdlEnter();
  Spin(cycles);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i + 1;
}

__global__ void WaitOnlyKernel() { PdlEnter(); }

// b = a + 1000, after spinning ≈ `cycles` (a slow reader).
__global__ void CopyPlusKernel(const int* a, int* b, int n, long long cycles) {
  PdlEnter();
  Spin(cycles);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + 1000;
}

__global__ void OverwriteKernel(int* a, int n, int value) {
  PdlEnter();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = value;
}

// Breaks the rule on purpose (no PdlEnter): counts the entries of a still 0.
__global__ void NoWaitCountZerosKernel(const int* a, int n, int* zeros) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && a[i] == 0) atomicAdd(zeros, 1);
}

class DeviceBuffers {
 public:
  DeviceBuffers() {
    ok_ = cudaMalloc(&a, kN * sizeof(int)) == cudaSuccess &&
          cudaMalloc(&b, kN * sizeof(int)) == cudaSuccess &&
          cudaMalloc(&zeros, sizeof(int)) == cudaSuccess &&
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
  }
  ~DeviceBuffers() {
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(zeros)}) {
      if (p != nullptr) (void)cudaFree(p);
    }
  }
  bool ok() const { return ok_; }
  std::vector<int> Host(const int* p, int n = kN) {
    std::vector<int> h(n);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), p, n * sizeof(int), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return h;
  }
  int *a = nullptr, *b = nullptr, *zeros = nullptr;
  cudaStream_t stream = nullptr;

 private:
  bool ok_ = false;
};

// How many of v differ from want(i).
template <typename F>
int Wrong(const std::vector<int>& v, F want) {
  int wrong = 0;
  for (int i = 0; i < static_cast<int>(v.size()); ++i) wrong += v[i] != want(i);
  return wrong;
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

TEST(LaunchKernelTest, AKernelSeesTheWritesBeforeItDirectlyAndDownTheChain) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  std::printf("programmatic dependent launch: %s\n", PdlEnabled() ? "on" : "off");
  DeviceBuffers d;
  ASSERT_TRUE(d.ok());
  for (bool chain : {false, true}) {
    for (long long cycles : {0LL, kSlow / 20, kSlow}) {
      ASSERT_EQ(cudaMemsetAsync(d.a, 0, kN * sizeof(int), d.stream), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(d.b, 0, kN * sizeof(int), d.stream), cudaSuccess);
      LaunchKernel(SlowWriteKernel, kBlocks, kThreads, 0, d.stream, d.a, kN, cycles);
      ASSERT_TRUE(CheckLaunch("SlowWriteKernel").ok());
      if (chain) {  // CopyPlus then depends on a kernel whose blocks do nothing but wait
        LaunchKernel(WaitOnlyKernel, kBlocks, kThreads, 0, d.stream);
        ASSERT_TRUE(CheckLaunch("WaitOnlyKernel").ok());
      }
      LaunchKernel(CopyPlusKernel, kBlocks, kThreads, 0, d.stream, d.a, d.b, kN, 0LL);
      ASSERT_TRUE(CheckLaunch("CopyPlusKernel").ok());
      EXPECT_EQ(Wrong(d.Host(d.b), [](int i) { return i + 1 + 1000; }), 0)
          << (chain ? "through a waiting kernel" : "directly") << ", cycles " << cycles;
    }
  }
}

TEST(LaunchKernelTest, AWriterWaitsForASlowReaderBeforeIt) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  DeviceBuffers d;
  ASSERT_TRUE(d.ok());
  for (long long cycles : {0LL, kSlow / 20, kSlow}) {
    LaunchKernel(SlowWriteKernel, kBlocks, kThreads, 0, d.stream, d.a, kN, 0LL);
    LaunchKernel(CopyPlusKernel, kBlocks, kThreads, 0, d.stream, d.a, d.b, kN, cycles);
    LaunchKernel(OverwriteKernel, kBlocks, kThreads, 0, d.stream, d.a, kN, -7);
    ASSERT_TRUE(CheckLaunch("SlowWrite, CopyPlus, Overwrite").ok());
    EXPECT_EQ(Wrong(d.Host(d.b), [](int i) { return i + 1 + 1000; }), 0) << "cycles " << cycles;
    EXPECT_EQ(Wrong(d.Host(d.a), [](int) { return -7; }), 0) << "cycles " << cycles;
  }
}

// The positive control: a kernel without PdlEnter after a slow writer. `graph`: the same
// launches captured into a CUDA graph and replayed (capture must keep the programmatic edge).
void ExpectEarlyLaunchOnlyWithPdl(bool graph) {
  DeviceBuffers d;
  ASSERT_TRUE(d.ok());
  auto enqueue = [&] {
    EXPECT_EQ(cudaMemsetAsync(d.a, 0, kN * sizeof(int), d.stream), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(d.zeros, 0, sizeof(int), d.stream), cudaSuccess);
    LaunchKernel(SlowWriteKernel, kBlocks, kThreads, 0, d.stream, d.a, kN, kSlow);
    LaunchKernel(NoWaitCountZerosKernel, kBlocks, kThreads, 0, d.stream, d.a, kN, d.zeros);
    EXPECT_TRUE(CheckLaunch("SlowWrite, NoWaitCountZeros").ok());
  };
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    ASSERT_EQ(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    enqueue();
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(d.stream, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  }
  for (int round = 0; round < 2; ++round) {
    if (graph) {
      ASSERT_EQ(cudaGraphLaunch(exec, d.stream), cudaSuccess);
    } else {
      enqueue();
    }
    // The whole device: the stream's next operation waits only for the kernel that did not wait
    // (its completion no longer implies the slow writer's).
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const int zeros = d.Host(d.zeros, 1)[0];
    EXPECT_EQ(Wrong(d.Host(d.a), [](int i) { return i + 1; }), 0);
    if (PdlEnabled()) {
      EXPECT_GT(zeros, 0) << "with PDL a kernel that does not wait runs before the slow writes "
                             "land: it saw none of them missing";
    } else {
      EXPECT_EQ(zeros, 0) << "without PDL a kernel runs after the one before it";
    }
  }
  if (exec != nullptr) EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST(LaunchKernelTest, AKernelThatDoesNotWaitRunsEarlyOnlyWithPdl) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  ExpectEarlyLaunchOnlyWithPdl(/*graph=*/false);
}

TEST(LaunchKernelTest, CudaGraphsKeepTheEarlyLaunch) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  ExpectEarlyLaunchOnlyWithPdl(/*graph=*/true);
}

}  // namespace
}  // namespace linfer::cuda
