// The slot pool: one allocation [slots, state_floats] f32 holding the states of the sequences
// the engine is running (and of idle sessions parked there), plus a token position per slot.
// Not thread-safe: the engine guards it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/model.h"

namespace linfer {

class StatePool {
 public:
  StatePool(int64_t state_floats, int num_slots);

  // Slots a byte budget holds (at least 1).
  static int SlotsForBudget(int64_t budget_bytes, int64_t state_bytes);

  int num_slots() const { return static_cast<int>(positions_.size()); }
  int free_slots() const { return static_cast<int>(free_.size()); }
  int used_slots() const { return num_slots() - free_slots(); }
  int64_t state_floats() const { return state_floats_; }

  // A zeroed slot (position 0), or −1 when none is free.
  int Allocate();
  void Free(int slot);

  float* data(int slot) { return data_.get() + static_cast<int64_t>(slot) * state_floats_; }
  const float* data(int slot) const {
    return data_.get() + static_cast<int64_t>(slot) * state_floats_;
  }
  int64_t& position(int slot) { return positions_[slot]; }
  StateRef Ref(int slot) { return {data(slot), &positions_[slot]}; }

 private:
  int64_t state_floats_;
  // [slots, state_floats], uninitialised until a slot is allocated: untouched slots cost no
  // resident memory.
  std::unique_ptr<float[]> data_;
  std::vector<int64_t> positions_;  // [slots]
  std::vector<int> free_;           // stack of free slot indices
};

}  // namespace linfer
