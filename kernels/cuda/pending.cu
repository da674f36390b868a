// CUDA twins not written yet: ops declared in kernels/cuda/ops.h (with a stub in stubs.cc) whose
// CUDA kernel is still to come return Unimplemented here, so the CUDA build links and a CUDA
// context reports which op is missing. Add an entry when adding an op; move it to its own .cu file
// when its kernel lands.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

[[maybe_unused]] absl::Status Pending(const char* op) {
  return absl::UnimplementedError(absl::StrCat(op, " has no CUDA kernel yet"));
}

}  // namespace
}  // namespace linfer::cuda
