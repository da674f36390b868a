// ParallelFor: a loop over the OpenMP threads only when the work pays for it.
#pragma once

#include <cstdint>

namespace linfer::cpu {

enum class Schedule { kStatic, kDynamic };

// Runs fn(i) for every i in [0, n): split over the OpenMP threads when `parallel`, else on the
// calling thread without entering an OpenMP region. (`#pragma omp parallel if (false)` still
// builds a one-thread team and wakes a barrier futex, which costs more than small work; a decode
// step makes hundreds of such calls.)
template <Schedule kSchedule = Schedule::kStatic, typename Fn>
void ParallelFor(int64_t n, bool parallel, Fn&& fn) {
  if (!parallel || n < 2) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else if constexpr (kSchedule == Schedule::kDynamic) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace linfer::cpu
