// Generation throughput through gRPC vs. the engine driven directly: same model, same requests,
// N concurrent streams (default 64). Prints both and the ratio (target ≥ 95%).
//   build/tests/bench/server_benchmark [--model DIR] [--streams 64] [--gen_tokens 64]
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/random_checkpoint.h"

ABSL_FLAG(std::string, model, "", "Model directory (default: a random 5M-parameter GDN)");
ABSL_FLAG(int, streams, 64, "Concurrent streams");
ABSL_FLAG(int, gen_tokens, 64, "Tokens generated per stream");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt tokens per stream");
ABSL_FLAG(int, rounds, 3, "Repetitions (best of)");

namespace linfer {
namespace {

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

double ThroughGrpc(int port, int streams, int prompt, int gen, int64_t vocab) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  std::vector<std::thread> threads;
  std::atomic<int64_t> tokens{0};
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r;
      for (int32_t id : testing_util::RandomTokens(prompt, vocab, i))
        r.mutable_token_ids()->add_ids(id);
      r.mutable_sampling()->set_temperature(0);
      r.mutable_stop()->set_max_tokens(gen);
      r.mutable_stop()->set_ignore_eos(true);
      grpc::ClientContext ctx;
      auto reader = stub->Generate(&ctx, r);
      v1::GenerateResponse msg;
      while (reader->Read(&msg)) tokens += msg.token_ids_size();
      if (!reader->Finish().ok()) std::abort();
    });
  }
  for (auto& t : threads) t.join();
  return tokens.load() / absl::ToDoubleSeconds(absl::Now() - t0);
}

}  // namespace
}  // namespace linfer

int main(int argc, char** argv) {
  using namespace linfer;
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / "linfer_bench_gdn").string();
    if (!testing_util::WriteRandomGdnCheckpoint(dir, {}).ok()) return 1;
  }
  auto model = Model::Load(dir);
  if (!model.ok()) return 1;
  const int64_t vocab = (*model)->vocab_size();
  EngineOptions eo;
  eo.state_memory_bytes = 256 << 20;
  eo.scheduler.max_step_tokens = 4096;
  auto engine = Engine::Create(*std::move(model), eo);
  if (!engine.ok()) return 1;
  ServerOptions so;
  so.grpc_port = 0;
  so.http_port = -1;
  auto server = Server::Start(so, *std::move(engine), nullptr, "bench");
  if (!server.ok()) return 1;
  const int n = absl::GetFlag(FLAGS_streams), gen = absl::GetFlag(FLAGS_gen_tokens),
            prompt = absl::GetFlag(FLAGS_prompt_tokens);
  double direct = 0, grpc_rate = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {  // interleaved, best of each
    direct = std::max(direct, EngineDirect((*server)->engine(), n, prompt, gen, vocab));
    grpc_rate = std::max(grpc_rate, ThroughGrpc((*server)->grpc_port(), n, prompt, gen, vocab));
  }
  std::printf(
      "%d streams x %d tokens: engine direct %.1f tokens/s, through gRPC %.1f tokens/s: "
      "%.1f%% of the engine\n",
      n, gen, direct, grpc_rate, 100.0 * grpc_rate / direct);
  return 0;
}
