// Device memory dispatch: host memory for the CPU, kernels/cuda/memory.cu for CUDA.
#include "kernels/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

absl::StatusOr<void*> HostAlloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  return p;
}

}  // namespace

absl::StatusOr<void*> AllocateDeviceMemory(Device device, size_t bytes) {
  switch (device) {
    case Device::kCpu:
      return HostAlloc(bytes);
    case Device::kCuda:
      return cuda::Allocate(bytes);
  }
  return absl::InternalError("unknown device");
}

void FreeDeviceMemory(Device device, void* p) {
  if (p == nullptr) return;
  switch (device) {
    case Device::kCpu:
      std::free(p);
      return;
    case Device::kCuda:
      cuda::Free(p);
      return;
  }
}

absl::Status ZeroDeviceMemory(Device device, void* p, size_t bytes) {
  switch (device) {
    case Device::kCpu:
      std::memset(p, 0, bytes);
      return absl::OkStatus();
    case Device::kCuda:
      return cuda::ZeroSync(p, bytes);
  }
  return absl::InternalError("unknown device");
}

absl::StatusOr<void*> AllocatePinnedHostMemory(Device device, size_t bytes) {
  switch (device) {
    case Device::kCpu:
      return HostAlloc(bytes);
    case Device::kCuda:
      return cuda::AllocatePinned(bytes);
  }
  return absl::InternalError("unknown device");
}

void FreePinnedHostMemory(Device device, void* p) {
  if (p == nullptr) return;
  switch (device) {
    case Device::kCpu:
      std::free(p);
      return;
    case Device::kCuda:
      cuda::FreePinned(p);
      return;
  }
}

absl::StatusOr<DeviceMemoryInfo> DeviceMemory(Device device) {
  switch (device) {
    case Device::kCpu:
      return absl::UnimplementedError("no device memory on the CPU");
    case Device::kCuda: {
      ASSIGN_OR_RETURN(const auto free_total, cuda::MemoryFreeTotal());
      return DeviceMemoryInfo{free_total.first, free_total.second};
    }
  }
  return absl::InternalError("unknown device");
}

absl::StatusOr<int64_t> DeviceMemoryInUse(Device device) {
  ASSIGN_OR_RETURN(const DeviceMemoryInfo memory, DeviceMemory(device));
  return memory.total_bytes - memory.free_bytes;
}

bool CudaAvailable() { return cuda::DeviceCount() > 0; }

}  // namespace linfer
