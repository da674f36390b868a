// Raw memory per device, below Tensor: allocation, release and zeroing. Dispatches on the device
// in one switch per function (kernels/device_memory.cc); the CUDA twins are in kernels/cuda/.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace linfer {

// `bytes` > 0. CPU: 64-byte aligned host memory. CUDA: device memory (cudaMalloc).
// ResourceExhausted when the device is out of memory; Unavailable when the build or machine has
// no such device.
absl::StatusOr<void*> AllocateDeviceMemory(Device device, size_t bytes);
void FreeDeviceMemory(Device device, void* p);  // never fails; logs CUDA errors
// Synchronous zero fill (used at load time and for fresh pools).
absl::Status ZeroDeviceMemory(Device device, void* p, size_t bytes);

// Host memory that the device can copy to and from asynchronously (CUDA: cudaHostAlloc; CPU:
// plain aligned memory). Freed with FreePinnedHostMemory(device, p).
absl::StatusOr<void*> AllocatePinnedHostMemory(Device device, size_t bytes);
void FreePinnedHostMemory(Device device, void* p);

// Device memory in use on the whole device (CUDA: total − free from cudaMemGetInfo, every
// process's allocations included; Unimplemented on the CPU). For leak checks in tests.
absl::StatusOr<int64_t> DeviceMemoryInUse(Device device);
// The device's free and total memory (CUDA: cudaMemGetInfo, other processes' allocations counted
// as used; Unimplemented on the CPU).
struct DeviceMemoryInfo {
  int64_t free_bytes = 0, total_bytes = 0;
};
absl::StatusOr<DeviceMemoryInfo> DeviceMemory(Device device);

// Whether this build has the CUDA backend and the machine a usable GPU.
bool CudaAvailable();

}  // namespace linfer
