// PdlEnabled (launch.cuh): LINFER_CUDA_PDL and the device's compute capability, read once.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/launch.cuh"

namespace linfer::cuda {

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
    Log(LogLevel::kInfo, "LINFER_CUDA_PDL=on: kernels launch with programmatic dependent launch");
    return true;
  }();
  return enabled;
}

}  // namespace linfer::cuda
