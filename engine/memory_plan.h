// The state pool's and the KV cache's budgets, and the step's, when the server is not told them
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
// The step's token budget (`--max_step_tokens 0`, the default) goes by the device too: 128 on the
// CPU, which prefills a few hundred tokens a second (small steps keep the others' inter-token
// latency low); on CUDA vLLM's API-server defaults for max_num_batched_tokens, 8192 on GPUs of
// kBigGpuBytes (70 GiB) or more, else 2048 — a GPU prefills tens of thousands a second and needs
// big steps, and at least --max_running tokens, or fewer sequences decode at once than it could
// hold. By memory alone: vLLM also keeps 2048 on an A100-80GB.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace linfer {

struct MemoryPlanInput {
  Device device = Device::kCpu;
  // CUDA: the device's memory free after the weights were loaded, and its total.
  int64_t free_bytes = 0, total_bytes = 0;
  bool has_kv = false;  // the model has attention layers with a KV cache (hybrids)
  // What the caller fixed (> 0), or 0: to be planned.
  int64_t state_bytes = 0, kv_bytes = 0;
  // The most state memory the pool can use (--max_slots × a state's bytes), or 0: no cap.
  int64_t max_state_bytes = 0;
  int64_t step_tokens = 0;  // the step's token budget the caller fixed (> 0), or 0
};

struct MemoryPlan {
  int64_t state_bytes = 0, kv_bytes = 0;
  int64_t step_tokens = 0;
};

inline constexpr double kUsableShare = 0.6;
inline constexpr int64_t kMinAutoBytes = int64_t{256} << 20;
inline constexpr int64_t kCpuAutoBytes = int64_t{1} << 30;
inline constexpr int64_t kBigGpuBytes = int64_t{70} << 30;

// The budgets: the caller's where given, else as above.
MemoryPlan PlanMemory(const MemoryPlanInput& in);

}  // namespace linfer
