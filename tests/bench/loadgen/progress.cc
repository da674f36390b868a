// Redraws "label [####......] done/total  fail  in-flight  elapsed" every 250 ms.
#include "tests/bench/loadgen/progress.h"

#include <chrono>
#include <cstdio>

namespace linfer::bench {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProgressBar::ProgressBar(std::string label, int total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), start_s_(NowSeconds()) {
  if (!enabled_) return;
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) Draw();
  });
}

ProgressBar::~ProgressBar() {
  if (!enabled_) return;
  stop_.Notify();
  thread_.join();
  Draw();
  std::fputc('\n', stderr);
}

void ProgressBar::Draw() {
  constexpr int kWidth = 30;
  const int done = done_.load();
  const int filled = total_ > 0 ? kWidth * done / total_ : kWidth;
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  std::fprintf(stderr, "\r%s [%s] %d/%d  failed %d  in-flight %d  %.1f s ", label_.c_str(), bar,
               done, total_, failed_.load(), in_flight_.load(), NowSeconds() - start_s_);
  std::fflush(stderr);
}

}  // namespace linfer::bench
