// Engine-only benchmark on the CPU: generation throughput at 1, 8 and 64 concurrent sequences,
// the scheduler's share of each step, and the point of sessions — time to first token of a
// follow-up turn on a session with 4,000 tokens of history vs. re-sending the history.
//   build/tests/bench/engine_benchmark [--model DIR] [--gen_tokens 64] [--history 4000]
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "tests/testing/random_checkpoint.h"

ABSL_FLAG(std::string, model, "", "Model directory (default: a random 5M-parameter GDN)");
ABSL_FLAG(int, gen_tokens, 64, "Tokens generated per request");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt tokens per request in the throughput runs");
ABSL_FLAG(int, history, 4000, "Session history for the follow-up-turn measurement");

namespace linfer {
namespace {

struct Waiter {
  absl::Mutex mu;
  int left = 0;
  std::vector<Usage> usages;
  EventSink Sink() {
    return [this](TokenEvent e) {
      if (e.finish == Finish::kNone) return;
      absl::MutexLock l(&mu);
      usages.push_back(e.usage);
      --left;
    };
  }
  void Wait() {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &left));
  }
};

GenerateRequest Request(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

Usage RunOne(Engine& engine, GenerateRequest r) {
  Waiter w;
  w.left = 1;
  if (!engine.Submit(std::move(r), w.Sink()).ok()) std::abort();
  w.Wait();
  return w.usages[0];
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::string> dir = testing_util::ModelDirOrRandom(absl::GetFlag(FLAGS_model));
  absl::StatusOr<std::unique_ptr<Model>> model =
      dir.ok() ? Model::Load(*dir) : absl::StatusOr<std::unique_ptr<Model>>(dir.status());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s: %s, %lld parameters, %lld state bytes per sequence\n", dir->c_str(),
              (*model)->config().model_type.c_str(),
              static_cast<long long>((*model)->num_parameters()),
              static_cast<long long>((*model)->state_bytes()));
  const int64_t vocab = (*model)->vocab_size();
  EngineOptions options;
  options.state_memory_bytes = 256 << 20;
  options.scheduler.max_step_tokens = 1024;
  auto engine = Engine::Create(*std::move(model), options);
  if (!engine.ok()) return 1;
  Engine& e = **engine;
  const int gen = absl::GetFlag(FLAGS_gen_tokens), prompt = absl::GetFlag(FLAGS_prompt_tokens);
  RunOne(e, Request(testing_util::RandomTokens(prompt, vocab, 0), 4));  // warm-up
  std::printf("\n%-12s %14s %14s %16s\n", "concurrency", "gen tokens/s", "steps", "scheduler/step");
  for (int c : {1, 8, 64}) {
    const EngineStats before = e.Stats();
    Waiter w;
    w.left = c;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < c; ++i) {
      if (!e.Submit(Request(testing_util::RandomTokens(prompt, vocab, i + 1), gen), w.Sink()).ok())
        return 1;
    }
    w.Wait();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const EngineStats after = e.Stats();
    const double sched = after.scheduler_seconds_total - before.scheduler_seconds_total;
    const double step = after.step_seconds_total - before.step_seconds_total;
    std::printf("%-12d %14.1f %14lld %15.3f%%\n", c, c * gen / secs,
                static_cast<long long>(after.steps_total - before.steps_total),
                100.0 * sched / step);
  }
  // Follow-up turn: session with `history` tokens vs. the full history as a new prompt.
  const int history = absl::GetFlag(FLAGS_history);
  if (!e.CreateSession("bench", "").ok()) return 1;
  GenerateRequest first = Request(testing_util::RandomTokens(history, vocab, 99), 1);
  first.session_id = "bench";
  RunOne(e, first);
  std::vector<int32_t> turn = testing_util::RandomTokens(16, vocab, 100);
  GenerateRequest follow = Request(turn, 1);
  follow.session_id = "bench";
  const Usage with_session = RunOne(e, follow);
  std::vector<int32_t> whole = first.prompt;
  whole.insert(whole.end(), turn.begin(), turn.end());
  const Usage without = RunOne(e, Request(whole, 1));
  std::printf(
      "\nfollow-up turn after %d tokens of history: TTFT %.2f ms with the session "
      "(%lld tokens reused), %.2f ms re-sending the history: %.1fx faster\n",
      history, 1e3 * with_session.ttft_seconds, static_cast<long long>(with_session.cached_tokens),
      1e3 * without.ttft_seconds, without.ttft_seconds / with_session.ttft_seconds);
  return 0;
}
