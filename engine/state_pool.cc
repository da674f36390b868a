// StatePool: a free list over one contiguous allocation.
#include "engine/state_pool.h"

#include <algorithm>

namespace linfer {

StatePool::StatePool(int64_t state_floats, int num_slots)
    : state_floats_(state_floats),
      data_(std::make_unique_for_overwrite<float[]>(static_cast<size_t>(state_floats) * num_slots)),
      positions_(num_slots, 0) {
  for (int s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

int StatePool::SlotsForBudget(int64_t budget_bytes, int64_t state_bytes) {
  if (state_bytes <= 0) return 1;
  return static_cast<int>(std::max<int64_t>(1, budget_bytes / state_bytes));
}

int StatePool::Allocate() {
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  std::fill_n(data(slot), state_floats_, 0.0f);
  positions_[slot] = 0;
  return slot;
}

void StatePool::Free(int slot) { free_.push_back(slot); }

}  // namespace linfer
