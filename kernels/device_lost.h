// A device failure that nothing later in this process can recover from: CUDA's "sticky" errors
// (an illegal address, a kernel's trap or assert, an uncorrectable ECC error, a launch failure…),
// after which every CUDA call of the process returns the same error and only a new process can use
// the GPU again. The CUDA twins mark such a status (kernels/cuda/cuda_check.cuh CudaStatus); the
// engine, finding one, ends every request and stops taking new ones, and the server exits so that
// its supervisor restarts it (as vLLM's API server does once its engine is dead).
// The mark is a status payload: it survives RETURN_IF_ERROR and ASSIGN_OR_RETURN, not a status
// rebuilt around the message.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace linfer {

// An Internal error marked as a lost device: `message` says what failed, where and why (for the
// log); `cause` only why (the device's error, for clients: no paths or call sites).
absl::Status DeviceLostError(absl::string_view message, absl::string_view cause);
bool IsDeviceLost(const absl::Status& status);
// A lost device's `cause` ("" for another status).
std::string DeviceLostCause(const absl::Status& status);

}  // namespace linfer
