// PlanMemory: the pools' and the step's budgets by device (engine/memory_plan.h).
#include "engine/memory_plan.h"

#include <algorithm>

namespace linfer {

MemoryPlan PlanMemory(const MemoryPlanInput& in) {
  MemoryPlan plan{in.state_bytes, in.kv_bytes, in.step_tokens};
  if (in.step_tokens <= 0) {
    plan.step_tokens = in.device == Device::kCpu        ? 128
                       : in.total_bytes >= kBigGpuBytes ? 8192
                                                        : 2048;
  }
  const bool auto_state = in.state_bytes <= 0, auto_kv = in.kv_bytes <= 0;
  // Without a KV cache the budget is never allocated: the CPU's default, as a placeholder.
  if (auto_kv && (in.device == Device::kCpu || !in.has_kv)) plan.kv_bytes = kCpuAutoBytes;
  if (in.device == Device::kCpu) {
    if (auto_state) plan.state_bytes = kCpuAutoBytes;
    return plan;
  }
  // CUDA: what the caller fixed comes off the usable share first (a purely recurrent model's
  // KV budget is never allocated, so it takes none).
  int64_t usable = static_cast<int64_t>(kUsableShare * static_cast<double>(in.free_bytes));
  if (!auto_state) usable -= in.state_bytes;
  if (!auto_kv && in.has_kv) usable -= in.kv_bytes;
  usable = std::max<int64_t>(usable, 0);
  const bool kv_planned = auto_kv && in.has_kv;
  // States beyond what the slots cap can use would stay unallocated: the KV cache gets them.
  auto capped = [&](int64_t bytes) {
    return in.max_state_bytes > 0 ? std::min(bytes, in.max_state_bytes) : bytes;
  };
  if (auto_state && kv_planned) {
    const int64_t states = capped(usable / 3 * 2);
    plan.state_bytes = std::max(states, kMinAutoBytes);
    plan.kv_bytes = std::max(usable - states, kMinAutoBytes);
  } else if (auto_state) {
    plan.state_bytes = std::max(capped(usable), kMinAutoBytes);
  } else if (kv_planned) {
    plan.kv_bytes = std::max(usable, kMinAutoBytes);
  }
  return plan;
}

}  // namespace linfer
