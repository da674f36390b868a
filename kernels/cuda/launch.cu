// PdlEnabled (launch.cuh): LINFER_CUDA_PDL and the device's compute capability, read once.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/launch.cuh"

namespace linfer::cuda {
namespace {

// Built with the same flags as every other kernel: its attributes say which code the device runs.
__global__ void ProbeKernel() { PdlEnter(); }

}  // namespace

bool PdlEnabled() {
  static const bool enabled = [] {
    if (EnvOption("LINFER_CUDA_PDL", {"off", "on"}) != "on") return false;
    const absl::StatusOr<int> major = DeviceAttribute(cudaDevAttrComputeCapabilityMajor);
    if (!major.ok() || *major < 9) {
      Log(LogLevel::kWarning,
          absl::StrCat("LINFER_CUDA_PDL=on: programmatic dependent launch needs compute "
                       "capability 9.0 or later (",
                       major.ok() ? absl::StrCat("this device has ", *major, ".x")
                                  : major.status().ToString(),
                       "); launching without it"));
      return false;
    }
    cudaFuncAttributes attributes{};
    const cudaError_t err = cudaFuncGetAttributes(&attributes, ProbeKernel);
    if (err != cudaSuccess || attributes.ptxVersion < 90) {
      (void)cudaGetLastError();
      Log(LogLevel::kWarning,
          absl::StrCat("LINFER_CUDA_PDL=on: the kernels were not compiled for compute capability "
                       "9.0 or later (",
                       err != cudaSuccess ? cudaGetErrorString(err)
                                          : absl::StrCat("PTX ", attributes.ptxVersion),
                       "), so they cannot wait for the kernels before them; launching without "
                       "programmatic dependent launch"));
      return false;
    }
    Log(LogLevel::kInfo, "LINFER_CUDA_PDL=on: kernels launch with programmatic dependent launch");
    return true;
  }();
  return enabled;
}

}  // namespace linfer::cuda
