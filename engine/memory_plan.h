// The state pool's and the KV cache's budgets when the server is not told them
// (`linfer serve --state_memory_mb 0 --kv_memory_mb 0`, the defaults), by device:
//   CPU:  1 GiB each (host memory is the machine's to share).
//   CUDA: of the device memory free once the weights are loaded, kUsableShare (60 %) goes to the
//         two pools; the rest stays free for what grows while serving — the step arena
//         (activations of --max_step_tokens tokens, attention's staged keys and partials),
//         cuBLASLt's workspace, the CUDA graphs. A budget the caller gives is taken off the usable
//         share first; the others share what remains: a hybrid's states two thirds (at most what
//         --max_slots slots take) and its KV the rest, a purely recurrent model's states all of it
//         (its KV budget is unused: 1 GiB, as on the CPU). Each auto budget is at least
//         kMinAutoBytes (256 MiB): a device already full fails the pool's allocation with an error
//         naming its size, rather than starting with nothing.
// Like vLLM's --gpu-memory-utilization (0.9 of the total by default, after profiling a forward
// pass), but without the profile: a fixed margin for the activations, measured from the free
// memory so that other processes on the GPU keep theirs.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace linfer {

struct MemoryPlanInput {
  Device device = Device::kCpu;
  int64_t free_bytes = 0;  // CUDA: device memory free after the weights were loaded
  bool has_kv = false;     // the model has attention layers with a KV cache (hybrids)
  // What the caller fixed (> 0), or 0: to be planned.
  int64_t state_bytes = 0, kv_bytes = 0;
  // The most state memory the pool can use (--max_slots × a state's bytes), or 0: no cap.
  int64_t max_state_bytes = 0;
};

struct MemoryPlan {
  int64_t state_bytes = 0, kv_bytes = 0;
};

inline constexpr double kUsableShare = 0.6;
inline constexpr int64_t kMinAutoBytes = int64_t{256} << 20;
inline constexpr int64_t kCpuAutoBytes = int64_t{1} << 30;

// The budgets: the caller's where given, else as above.
MemoryPlan PlanMemory(const MemoryPlanInput& in);

}  // namespace linfer
