// CUDA resources behind kernels/device_context.h, declared without CUDA headers so that host code
// (and the build without CUDA, where kernels/cuda/stubs.cc implements them as Unavailable) can hold
// them as opaque pointers. kernels/cuda/resources.cu implements them.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linfer::cuda {

// What ExecContext::blas points at on CUDA: a cuBLASLt handle and the workspace its matmuls may
// use (owned by a DeviceContext; a null ExecContext::blas makes Linear use a per-device default).
struct BlasResources {
  void* handle = nullptr;     // cublasLtHandle_t
  void* workspace = nullptr;  // device memory
  size_t workspace_bytes = 0;
};

// The name of a cublasStatus_t (cublasGetStatusName lives in libcublas, which linfer does not
// link: cuBLASLt alone does the matmuls).
const char* CublasStatusName(int status);

// Makes `ordinal` the calling thread's current device.
absl::Status SetDevice(int ordinal);

// A non-blocking stream on the current device; DestroyStream never fails (logs errors).
absl::StatusOr<void*> CreateStream();
void DestroyStream(void* stream);

// A cuBLASLt handle and `workspace_bytes` of device memory for it.
absl::Status CreateBlas(size_t workspace_bytes, BlasResources* blas);
void DestroyBlas(BlasResources* blas);

// CUDA graphs: everything queued on `stream` between BeginCapture and EndCapture (captured in
// thread-local mode, so other threads may keep using CUDA) becomes an executable graph that
// LaunchGraph replays on a stream. Kernels read their arguments (pointers, sizes) as captured.
absl::Status BeginCapture(void* stream);
absl::StatusOr<void*> EndCapture(void* stream);  // a cudaGraphExec_t
absl::Status LaunchGraph(void* graph_exec, void* stream);
void DestroyGraph(void* graph_exec);

}  // namespace linfer::cuda
