// A one-line progress bar on stderr (like vLLM's tqdm bar), redrawn by its own thread.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"

namespace linfer::bench {

class ProgressBar {
 public:
  // Draws nothing when `enabled` is false.
  ProgressBar(std::string label, int total, bool enabled);
  ~ProgressBar();  // draws the final state and ends the line

  // Thread-safe.
  void Started() { in_flight_.fetch_add(1); }
  void Finished(bool ok) {
    in_flight_.fetch_sub(1);
    done_.fetch_add(1);
    if (!ok) failed_.fetch_add(1);
  }

 private:
  void Draw();

  const std::string label_;
  const int total_;
  const bool enabled_;
  std::atomic<int> done_{0}, failed_{0}, in_flight_{0};
  absl::Notification stop_;
  std::thread thread_;
  double start_s_ = 0;
};

}  // namespace linfer::bench
