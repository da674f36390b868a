// Helpers for engine tests: an engine on a reference fixture, deterministic prompts, and a
// thread-safe event collector.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "tests/testing/fixture_paths.h"

namespace linfer::testing_util {

// The weights a device serves with: bf16 matmuls on CUDA, f32 on the CPU (the server's default).
inline LoadOptions ServingLoadOptions(Device device) {
  return {device, device == Device::kCuda ? DType::kBF16 : DType::kF32};
}

// An engine on fixture `fixture` (a directory under LINFER_FLA_FIXTURES, or an absolute path).
inline std::unique_ptr<Engine> MakeEngineOn(const LoadOptions& load, EngineOptions options = {},
                                            const std::string& fixture = "gdn_default") {
  const std::string dir =
      fixture.starts_with("/") ? fixture : FixtureSetDir(LINFER_FLA_FIXTURES) + "/" + fixture;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir, load);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  if (options.state_memory_bytes == (int64_t{1} << 30)) options.state_memory_bytes = 64 << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(*std::move(model), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return nullptr;
  return *std::move(engine);
}

inline std::unique_ptr<Engine> MakeEngine(EngineOptions options = {},
                                          const std::string& fixture = "gdn_default") {
  return MakeEngineOn({}, std::move(options), fixture);
}

// An empty directory for this test (a disk tier persists sessions across engines: tests must
// not see another run's files).
inline std::string FreshDir(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// n token ids in [0, 96) from a seeded generator.
inline std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng() % 96);
  return p;
}

// Greedy decoding with top-5 logprobs, EOS ignored (the engine tests' comparisons).
inline GenerateRequest Greedy(std::vector<int32_t> prompt, int max_tokens,
                              std::string session = "") {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 5;
  r.session_id = std::move(session);
  return r;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::string text;
  Finish finish = Finish::kNone;
  Usage usage;
  std::vector<PromptLogprob> prompt_logprobs;  // GenerateRequest::prompt_logprobs
  int prompt_logprob_events = 0;               // events that carried them
};

class Collector {
 public:
  EventSink Sink() {
    return [this](TokenEvent e) {
      absl::MutexLock l(&mu_);
      if (e.token >= 0) {
        result_.tokens.push_back(e.token);
        result_.top.push_back(e.top_logprobs);
      }
      result_.text += e.text;
      if (!e.prompt_logprobs.empty()) {
        result_.prompt_logprobs = e.prompt_logprobs;
        ++result_.prompt_logprob_events;
      }
      if (e.finish != Finish::kNone) {
        result_.finish = e.finish;
        result_.usage = e.usage;
        final_ = e;
        done_ = true;
      }
    };
  }
  void Wait() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&done_));
  }
  void WaitTokens(size_t n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return result_.tokens.size() >= n || done_;
    };
    mu_.Await(absl::Condition(&enough));
  }
  Result result() {
    absl::MutexLock l(&mu_);
    return result_;
  }
  TokenEvent Final() {
    absl::MutexLock l(&mu_);
    return final_;
  }

 private:
  absl::Mutex mu_;
  Result result_ ABSL_GUARDED_BY(mu_);
  TokenEvent final_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

inline Result Run(Engine& engine, const GenerateRequest& request) {
  Collector c;
  absl::StatusOr<RequestId> id = engine.Submit(request, c.Sink());
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return {};
  c.Wait();
  return c.result();
}

// Greedy runs of one model by two computation paths whose logits differ by rounding (CUDA's
// bf16 tensor-core chunked prefill against its f32 token-by-token step): the same tokens with
// top-1 logprobs within `tol`, up to the first step where `want`'s two best candidates lie within
// 2·tol of each other — there either pick is right, and the runs are compared no further. A
// divergence anywhere else fails. Needs top-2 logprobs (Greedy asks for 5).
inline void ExpectGreedyAgreesUntilNearTie(const Result& got, const Result& want, double tol) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  ASSERT_EQ(want.top.size(), want.tokens.size());
  ASSERT_EQ(got.top.size(), got.tokens.size());
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    ASSERT_GE(want.top[i].size(), 2u);
    const double gap = want.top[i][0].second - want.top[i][1].second;
    if (gap <= 2 * tol) {
      std::printf("step %zu: a near tie (top-2 gap %.4g): compared up to here\n", i, gap);
      return;
    }
    ASSERT_EQ(got.tokens[i], want.tokens[i]) << "step " << i << ", top-2 gap " << gap;
    EXPECT_LE(std::abs(got.top[i][0].second - want.top[i][0].second), tol) << "step " << i;
  }
}

inline void ExpectLogprobsNear(const Result& a, const Result& b, double tol) {
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t i = 0; i < a.top.size(); ++i) {
    ASSERT_EQ(a.top[i].size(), b.top[i].size());
    for (size_t j = 0; j < a.top[i].size(); ++j) {
      EXPECT_EQ(a.top[i][j].first, b.top[i][j].first) << "token " << i << " rank " << j;
      EXPECT_LE(std::abs(a.top[i][j].second - b.top[i][j].second), tol)
          << "token " << i << " rank " << j;
    }
  }
}

}  // namespace linfer::testing_util
