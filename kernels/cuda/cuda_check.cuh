// Shared plumbing of the CUDA twins: CUDA errors as absl::Status (CUDA_RETURN_IF_ERROR, the one
// macro of kernels/cuda/, kept here so common/ stays free of CUDA), the launch check every launcher
// calls after a kernel launch, the context's stream, and small device helpers (bf16 conversion,
// warp reductions, view indexing) shared by the kernel files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/context.h"
#include "kernels/device_lost.h"

namespace linfer::cuda {

// Whether `err` is one that leaves the process's CUDA context unusable: every later CUDA call
// returns it again, "to continue using CUDA, the process must be terminated and relaunched"
// (driver_types.h says so of each; an uncorrectable ECC error too).
inline bool StickyError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
#if CUDART_VERSION >= 12080  // Blackwell's error containment and tensor memory
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
#endif
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

// An absl::Status for a failed CUDA call: ResourceExhausted for out-of-memory, Unavailable when no
// usable device or driver exists, a lost device (kernels/device_lost.h) for the sticky errors,
// Internal otherwise; the message names the call and the place.
inline absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  // The failed call's error is also the thread's last error: clear it, or the next launch check
  // (cudaGetLastError) would report it as its own (a sticky error stays either way).
  (void)cudaGetLastError();
  const std::string msg = absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                                       cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  if (StickyError(err)) {
    return DeviceLostError(msg,
                           absl::StrCat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
  }
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace linfer::cuda

// Returns a Status from the current function when the CUDA call `expr` fails.
#define CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                \
    const cudaError_t linfer_cuda_err_ = (expr);                                      \
    if (linfer_cuda_err_ != cudaSuccess) {                                            \
      return ::linfer::cuda::CudaStatus(linfer_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

namespace linfer::cuda {

// The error of this thread's last failed LaunchKernel (launch.cuh) not yet reported by CheckLaunch
// (cudaLaunchKernelEx returns its error; it is not left to cudaGetLastError alone).
inline cudaError_t& PendingLaunchError() {
  thread_local cudaError_t err = cudaSuccess;
  return err;
}

// Op timing (kernels/op_timer.h, op_timer.cu): the window open on this thread, if any, and the
// stream of this thread's last LaunchKernel (where a launch's timing event goes).
class OpWindow;
inline OpWindow*& ActiveOpWindow() {
  thread_local OpWindow* window = nullptr;
  return window;
}
inline cudaStream_t& LastLaunchStream() {
  thread_local cudaStream_t stream = nullptr;
  return stream;
}
// A timing event after the launch just made on `stream`, labelled (the window's gate follows its
// first launch); `entries`: what the launch and its event take of the stream's queue.
void MarkLaunch(OpWindow& window, std::string_view label, cudaStream_t stream, int entries = 2);
// Before the host waits for the device: an open window's gate opens first (it waits for the
// host; the host would wait for it).
void OpenGate(OpWindow& window);
inline void BeforeHostWait() {
  if (OpWindow* w = ActiveOpWindow(); w != nullptr) OpenGate(*w);
}

// Called right after every kernel launch: a bad configuration shows up here, not later.
inline absl::Status CheckLaunch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (PendingLaunchError() != cudaSuccess) err = std::exchange(PendingLaunchError(), cudaSuccess);
  if (err == cudaSuccess) {
    if (OpWindow* w = ActiveOpWindow(); w != nullptr) MarkLaunch(*w, kernel, LastLaunchStream());
    return absl::OkStatus();
  }
  return CudaStatus(err, kernel, "launch", 0);
}

inline cudaStream_t Stream(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// An attribute of the current device (SM count, shared-memory limits, …).
inline absl::StatusOr<int> DeviceAttribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Grid size for `n` independent items of `per_block` each, capped (grid-stride loops cover the
// rest).
inline unsigned GridFor(int64_t n, int per_block, int64_t cap = int64_t{1} << 20) {
  const int64_t blocks = CeilDiv(n, per_block);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// A [rows, cols] f32 view as the kernels see it: base pointer and row stride in elements.
struct Mat {
  float* p;
  int64_t ld;
  __host__ __device__ float& operator()(int64_t r, int64_t c) const { return p[r * ld + c]; }
};
inline Mat AsMat(const TensorView& t) { return {t.data<float>(), t.row_stride()}; }

struct Row4 {  // one segment row of the device segment table (I64 [n, 4])
  int64_t row_begin, num_tokens, position, slot;
};
__device__ inline Row4 LoadSegment(const int64_t* table, int64_t i) {
  const int64_t* r = table + 4 * i;
  return {r[0], r[1], r[2], r[3]};
}

__device__ inline float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ inline float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ inline float Bf16ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline __nv_bfloat16 FloatToBf16(float x) { return __float2bfloat16_rn(x); }

// The activations of kernels/activation.h, in f32 on the device (same formulas as the CPU twin).
__device__ inline float DeviceSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float DeviceSoftplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
// SwiGLU's product silu(g)·u, in the one order every kernel that forms it uses.
__device__ inline float DeviceSwiGlu(float g, float u) { return g * DeviceSigmoid(g) * u; }
__device__ inline float DeviceActivate(int act, float x) {
  switch (act) {
    case 1:  // kSilu
      return x * DeviceSigmoid(x);
    case 2:  // kRelu
      return x > 0.0f ? x : 0.0f;
    case 3:  // kElu
      return x > 0.0f ? x : expm1f(x);
    case 4:  // kEluPlusOne
      return x > 0.0f ? x + 1.0f : expf(x);
    case 5:  // kSigmoid
      return DeviceSigmoid(x);
    case 6:  // kTanh
      return tanhf(x);
    case 7:  // kGelu
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    default:  // kIdentity
      return x;
  }
}

}  // namespace linfer::cuda
