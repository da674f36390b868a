// Streams, cuBLASLt handles with their workspace, and CUDA graph capture/replay for
// kernels/device_context.cc (declared in kernels/cuda/resources.h). No kernels.
#include <cublasLt.h>

#include "common/logging.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/resources.h"

namespace linfer::cuda {

const char* CublasStatusName(int status) {
  switch (static_cast<cublasStatus_t>(status)) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

absl::Status SetDevice(int ordinal) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  return absl::OkStatus();
}

absl::StatusOr<void*> CreateStream() {
  cudaStream_t s = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return static_cast<void*>(s);
}

void DestroyStream(void* stream) {
  if (stream == nullptr) return;
  const cudaError_t err = cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    Log(LogLevel::kError, absl::StrCat("cudaStreamDestroy: ", cudaGetErrorString(err)));
  }
}

absl::Status CreateBlas(size_t workspace_bytes, BlasResources* blas) {
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t st = cublasLtCreate(&handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("cublasLtCreate failed: ", CublasStatusName(st)));
  }
  void* ws = nullptr;
  if (workspace_bytes > 0) {
    BeforeHostWait();  // kernels/op_timer.h
    const cudaError_t err = cudaMalloc(&ws, workspace_bytes);
    if (err != cudaSuccess) {
      cublasLtDestroy(handle);
      return CudaStatus(err, "cudaMalloc(cuBLASLt workspace)", __FILE__, __LINE__);
    }
  }
  blas->handle = handle;
  blas->workspace = ws;
  blas->workspace_bytes = workspace_bytes;
  return absl::OkStatus();
}

void DestroyBlas(BlasResources* blas) {
  if (blas->workspace != nullptr) {
    const cudaError_t err = cudaFree(blas->workspace);
    if (err != cudaSuccess) {
      Log(LogLevel::kError, absl::StrCat("cudaFree(workspace): ", cudaGetErrorString(err)));
    }
  }
  if (blas->handle != nullptr) {
    const cublasStatus_t st = cublasLtDestroy(static_cast<cublasLtHandle_t>(blas->handle));
    if (st != CUBLAS_STATUS_SUCCESS) {
      Log(LogLevel::kError, absl::StrCat("cublasLtDestroy: ", CublasStatusName(st)));
    }
  }
  *blas = BlasResources{};
}

absl::Status BeginCapture(void* stream) {
  CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
  return absl::OkStatus();
}

absl::StatusOr<void*> EndCapture(void* stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (end != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return CudaStatus(end, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  const cudaError_t destroy = cudaGraphDestroy(graph);  // the executable graph keeps its copy
  if (err != cudaSuccess) return CudaStatus(err, "cudaGraphInstantiate", __FILE__, __LINE__);
  if (destroy != cudaSuccess) {
    (void)cudaGraphExecDestroy(exec);
    return CudaStatus(destroy, "cudaGraphDestroy", __FILE__, __LINE__);
  }
  return static_cast<void*>(exec);
}

absl::Status LaunchGraph(void* graph_exec, void* stream) {
  CUDA_RETURN_IF_ERROR(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec), static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

void DestroyGraph(void* graph_exec) {
  if (graph_exec == nullptr) return;
  const cudaError_t err = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec));
  if (err != cudaSuccess) {
    Log(LogLevel::kError, absl::StrCat("cudaGraphExecDestroy: ", cudaGetErrorString(err)));
  }
}

}  // namespace linfer::cuda
