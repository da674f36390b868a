// OpTimer::Create: dispatch (kernels/op_timer.h; the CUDA timer is kernels/cuda/op_timer.cu).
#include "kernels/op_timer.h"

#include "kernels/cuda/ops.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<OpTimer>> OpTimer::Create(Device device) {
  if (device != Device::kCuda) {
    return absl::FailedPreconditionError(
        "op timing is for CUDA devices: on the CPU every op runs synchronously, so a profiler "
        "or a wall clock around it says the same");
  }
  return cuda::CreateOpTimer();
}

}  // namespace linfer
