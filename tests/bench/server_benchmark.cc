// Generation throughput through gRPC vs. the engine driven directly: same model, same requests,
// N concurrent streams (default 64). Prints both and the ratio (target ≥ 95%), and per kind of
// run the engine's steps, how busy it was and the CPU time of the server and of the client.
// The gRPC client is a separate process (forked before any thread starts), like a remote client,
// so the server's CPU time is its own. With --device cuda the model runs on the GPU the way
// `linfer serve --device cuda` runs it (bf16 matmul weights, CUDA graphs, device pre-sampling).
//   build/tests/bench/server_benchmark [--model DIR] [--device cpu|cuda] [--streams 64]
//                                      [--gen_tokens 128]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/device_memory.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "server/server.h"
#include "tests/bench/loadgen/client.h"
#include "tests/testing/random_checkpoint.h"

ABSL_FLAG(std::string, model, "", "Model directory (default: a random 5M-parameter GDN)");
ABSL_FLAG(int, streams, 64, "Concurrent streams");
ABSL_FLAG(int, gen_tokens, 128, "Tokens generated per stream");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt tokens per stream");
ABSL_FLAG(int, rounds, 5, "Rounds, each a direct run then a gRPC run");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda (bf16 matmul weights, as linfer serve)");
ABSL_FLAG(int64_t, state_memory_mb, 256, "State slot pool, MiB (at least one slot per stream)");
ABSL_FLAG(int64_t, max_step_tokens, 4096, "Tokens in one engine step");

namespace linfer {
namespace {

// Engine steps during one kind of run: how many, how full, and how much of the wall time the
// engine spent stepping (the rest it waited for work).
struct Phase {
  int64_t steps = 0, tokens = 0;
  double step_seconds = 0, wall_seconds = 0, server_cpu = 0, client_cpu = 0;
  void Add(const EngineStats& a, const EngineStats& b, absl::Duration wall, double cpu) {
    steps += b.steps_total - a.steps_total;
    tokens += b.step_tokens_total - a.step_tokens_total;
    step_seconds += b.step_seconds_total - a.step_seconds_total;
    wall_seconds += absl::ToDoubleSeconds(wall);
    server_cpu += cpu;
  }
  void Print(const char* name) const {
    std::printf(
        "  %s: %lld steps, %.1f tokens/step, %.2f ms/step, engine busy %.1f%% of the time; "
        "CPU seconds per wall second: server %.2f, client %.2f\n",
        name, static_cast<long long>(steps), static_cast<double>(tokens) / steps,
        1e3 * step_seconds / steps, 100.0 * step_seconds / wall_seconds, server_cpu / wall_seconds,
        client_cpu / wall_seconds);
  }
};

// User + system CPU seconds of this process (all threads).
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double EngineDirect(Engine& e, int streams, int prompt, int gen, int64_t vocab) {
  absl::Mutex mu;
  int left = streams;
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < streams; ++i) {
    GenerateRequest r;
    r.prompt = testing_util::RandomTokens(prompt, vocab, i);
    r.sampling.temperature = 0;
    r.stop.max_tokens = gen;
    r.stop.ignore_eos = true;
    auto st = e.Submit(std::move(r), [&](TokenEvent ev) {
      if (ev.finish == Finish::kNone) return;
      absl::MutexLock l(&mu);
      --left;
    });
    if (!st.ok()) std::abort();
  }
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &left));
  return streams * gen / absl::ToDoubleSeconds(absl::Now() - t0);
}

// All streams on one channel through the callback API (as the load generator drives it), so
// the client spends little of the shared CPU: no thread per stream.
double ThroughGrpc(bench::BenchClient& client, int streams, int prompt, int gen, int64_t vocab) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < streams; ++i) {
    requests.push_back(bench::MakeRequest({testing_util::RandomTokens(prompt, vocab, i), gen},
                                          /*temperature=*/0, /*seed=*/0, /*session_id=*/""));
  }
  std::vector<bench::RequestResult> results(streams);
  absl::Mutex mu;
  int left = streams;
  const auto t0 = bench::Clock::now();
  const absl::Time start = absl::Now();
  for (int i = 0; i < streams; ++i) {
    client.Start(requests[i], t0, t0 + std::chrono::minutes(10), /*keep_output_ids=*/false,
                 &results[i], [&] {
                   absl::MutexLock l(&mu);
                   --left;
                 });
  }
  {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &left));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  int64_t tokens = 0;
  for (const bench::RequestResult& r : results) {
    if (!r.success || r.received_tokens != gen) {
      std::fprintf(stderr, "stream failed: %s (%lld tokens)\n", r.error.c_str(),
                   static_cast<long long>(r.received_tokens));
      std::abort();
    }
    tokens += r.received_tokens;
  }
  return tokens / seconds;
}

// The client process: runs one round per command read from the pipe, answers with the rate and
// its CPU seconds; exits when the pipe closes.
struct RoundCommand {
  int port, streams, prompt, gen;
  int64_t vocab;
};
struct RoundResult {
  double tokens_per_s, cpu_seconds;
};

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

[[noreturn]] void ClientMain(int in, int out) {
  std::unique_ptr<bench::BenchClient> client;
  RoundCommand cmd;
  while (ReadAll(in, &cmd, sizeof(cmd))) {
    if (client == nullptr) {
      auto c = bench::BenchClient::Connect(absl::StrCat("127.0.0.1:", cmd.port), "");
      if (!c.ok()) _exit(1);
      client = *std::move(c);
    }
    const double cpu0 = CpuSeconds();
    RoundResult r;
    r.tokens_per_s = ThroughGrpc(*client, cmd.streams, cmd.prompt, cmd.gen, cmd.vocab);
    r.cpu_seconds = CpuSeconds() - cpu0;
    if (write(out, &r, sizeof(r)) != sizeof(r)) _exit(1);
  }
  _exit(0);
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  absl::ParseCommandLine(argc, argv);
  int to_client[2], from_client[2];
  if (pipe(to_client) != 0 || pipe(from_client) != 0) return 1;
  const pid_t child = fork();  // before any thread exists
  if (child < 0) return 1;
  if (child == 0) {
    close(to_client[1]);
    close(from_client[0]);
    ClientMain(to_client[0], from_client[1]);
  }
  close(to_client[0]);
  close(from_client[1]);
  // After the fork: the client process never touches CUDA.
  LoadOptions load;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
    if (!CudaAvailable()) {
      std::printf("no CUDA device (or a build without CUDA): nothing to measure\n");
      return 0;
    }
    load = {Device::kCuda, DType::kBF16, DType::kF32};
  } else if (device != "cpu") {
    std::fprintf(stderr, "--device must be cpu or cuda, got '%s'\n", device.c_str());
    return 1;
  }
  absl::StatusOr<std::string> dir = testing_util::ModelDirOrRandom(absl::GetFlag(FLAGS_model));
  absl::StatusOr<std::unique_ptr<Model>> model =
      dir.ok() ? Model::Load(*dir, load) : absl::StatusOr<std::unique_ptr<Model>>(dir.status());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const int64_t vocab = (*model)->vocab_size();
  EngineOptions eo;
  eo.state_memory_bytes = absl::GetFlag(FLAGS_state_memory_mb) << 20;
  eo.scheduler.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  auto engine = Engine::Create(*std::move(model), eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s on %s\n", dir->c_str(), device.c_str());
  ServerOptions so;
  so.grpc_port = 0;
  so.http_port = -1;
  auto server = Server::Start(so, *std::move(engine), nullptr, "bench");
  if (!server.ok()) return 1;
  const int n = absl::GetFlag(FLAGS_streams), gen = absl::GetFlag(FLAGS_gen_tokens),
            prompt = absl::GetFlag(FLAGS_prompt_tokens);
  double direct = 0, grpc_rate = 0;
  Engine& eng = (*server)->engine();
  Phase direct_phase, grpc_phase;
  std::vector<double> ratios;  // per round: gRPC over the direct run just before it
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {  // interleaved, best of each
    const EngineStats s0 = eng.Stats();
    const absl::Time t0 = absl::Now();
    const double cpu0 = CpuSeconds();
    const double d = EngineDirect(eng, n, prompt, gen, vocab);
    direct = std::max(direct, d);
    const EngineStats s1 = eng.Stats();
    const absl::Time t1 = absl::Now();
    const double cpu1 = CpuSeconds();
    const RoundCommand cmd{(*server)->grpc_port(), n, prompt, gen, vocab};
    RoundResult res;
    if (write(to_client[1], &cmd, sizeof(cmd)) != sizeof(cmd) ||
        !ReadAll(from_client[0], &res, sizeof(res))) {
      std::fprintf(stderr, "the client process failed\n");
      return 1;
    }
    grpc_rate = std::max(grpc_rate, res.tokens_per_s);
    ratios.push_back(res.tokens_per_s / d);
    direct_phase.Add(s0, s1, t1 - t0, cpu1 - cpu0);
    grpc_phase.Add(s1, eng.Stats(), absl::Now() - t1, CpuSeconds() - cpu1);
    grpc_phase.client_cpu += res.cpu_seconds;
  }
  close(to_client[1]);
  waitpid(child, nullptr, 0);
  std::printf(
      "%d streams x %d tokens: engine direct %.1f tokens/s, through gRPC %.1f tokens/s (best of "
      "%zu): %.1f%% of the engine\n",
      n, gen, direct, grpc_rate, ratios.size(), 100.0 * grpc_rate / direct);
  std::sort(ratios.begin(), ratios.end());
  std::printf("  per round (gRPC / the direct run just before): median %.1f%%, range %.1f-%.1f%%\n",
              100.0 * ratios[ratios.size() / 2], 100.0 * ratios.front(), 100.0 * ratios.back());
  direct_phase.Print("engine direct");
  grpc_phase.Print("through gRPC ");
  return 0;
}
