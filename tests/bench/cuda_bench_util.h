// What tests/bench's CUDA benchmarks share (cuda_recurrence_benchmark.cc, cuda_op_benchmarks.cc):
// the device context, the L2 flush buffer and the copy bandwidth measured at start, abort-on-error
// checks, device tensors from host values, and event timing of one call, cold (L2 flushed first)
// or warm.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device_context.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"
#include "kernels/transfer.h"

namespace linfer::bench {

inline DeviceContext* g_ctx = nullptr;
inline double g_copy_gbps = 0;   // device-to-device copy, bytes read + written per second
inline void* g_flush = nullptr;  // 2 × L2 bytes, rewritten before every cold timed call
inline size_t g_flush_bytes = 0;

inline void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::abort();
  }
}
inline void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}
inline cudaStream_t Stream() { return static_cast<cudaStream_t>(g_ctx->exec().stream); }

// An uninitialised device tensor (aborts naming `what` if it cannot be had).
inline Tensor Empty(DType dtype, Shape shape, const char* what) {
  absl::StatusOr<Tensor> t = Tensor::Empty(dtype, shape, Device::kCuda);
  Check(t.status(), what);
  return *std::move(t);
}

// A device tensor of `shape` holding `host`'s values (segment and block tables).
template <typename T>
Tensor Uploaded(const std::vector<T>& host, DType dtype, Shape shape, const char* what) {
  Tensor t = Empty(dtype, shape, what);
  Check(Upload(g_ctx->exec(), host.data(), t.view()), what);
  return t;
}

// A device tensor of `shape` with every element zero.
inline Tensor Zeros(DType dtype, Shape shape, const char* what) {
  Tensor t = Empty(dtype, shape, what);
  Check(ZeroTensor(g_ctx->exec(), t.view()), what);
  return t;
}

// A device f32 tensor of `shape` filled with uniform values in [lo, hi) (a cheap host LCG).
inline Tensor Filled(Shape shape, float lo, float hi, uint32_t seed) {
  Tensor t = Empty(DType::kF32, shape, "alloc");
  std::vector<float> host(static_cast<size_t>(t.numel()));
  uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  for (float& v : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
  }
  Check(Upload(g_ctx->exec(), host.data(), t.view()), "upload");
  Check(g_ctx->Synchronize(), "sync");
  return t;
}

// Times `launch` with events; `cold` first overwrites the flush buffer (evicting L2).
inline double TimeOnce(bool cold, const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "event");
  CheckCuda(cudaEventCreate(&stop), "event");
  static int salt = 0;
  if (cold) CheckCuda(cudaMemsetAsync(g_flush, ++salt & 0xff, g_flush_bytes, Stream()), "flush");
  CheckCuda(cudaEventRecord(start, Stream()), "record");
  launch();
  CheckCuda(cudaEventRecord(stop, Stream()), "record");
  CheckCuda(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  CheckCuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3;
}

// Device-to-device copy of 1 GiB: bytes read + written per second, best of 10.
inline double MeasureCopy() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CheckCuda(cudaMalloc(&a, bytes), "malloc");
  CheckCuda(cudaMalloc(&b, bytes), "malloc");
  CheckCuda(cudaMemsetAsync(a, 1, bytes, Stream()), "memset");
  double best = 0;
  for (int i = 0; i < 10; ++i) {
    const double s = TimeOnce(false, [&] {
      CheckCuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, Stream()), "copy");
    });
    best = std::max(best, 2.0 * bytes / s);
  }
  cudaFree(a);
  cudaFree(b);
  return best;
}

// The attention and Linear benchmarks (cuda_op_benchmarks.cc).
void RegisterOpBenchmarks();

}  // namespace linfer::bench
