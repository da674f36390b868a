// RWKV World tokenizer encode throughput (MB/s, one thread) next to the Python reference
// (tests/tokenizer/rwkv_world/reference.py) on the same corpus in the same run. The corpus is the
// one the tokenizer tests use (rwkv_world/make_corpus.py, ~1.8 MB of mixed scripts, code,
// whitespace runs and raw bytes), generated into a temporary directory first.
// Usage: rwkv_world_benchmark [--benchmark_filter=...]; LINFER_BENCH_NO_REFERENCE=1 skips Python.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "benchmark/benchmark.h"
#include "models/tokenizer/json_util.h"
#include "models/tokenizer/rwkv_world.h"

namespace {

using linfer::tokenizer::RwkvWorldVocab;

const char kVocab[] = LINFER_SOURCE_DIR "/tests/data/rwkv_world/rwkv_vocab_v20230424.txt";
const char kScripts[] = LINFER_SOURCE_DIR "/tests/tokenizer/rwkv_world";

std::string RunCommand(const std::string& cmd) {
  std::string output;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
    pclose(pipe);
  }
  return output;
}

const std::filesystem::path& CorpusPath() {
  static const auto* path =
      new std::filesystem::path(std::filesystem::temp_directory_path() /
                                ("linfer_rwkv_world_bench_" + std::to_string(getpid()) + ".jsonl"));
  return *path;
}

// The text and byte records of the generated corpus (id records are for decoding only).
std::vector<std::string> LoadCorpus() {
  RunCommand(std::string("/usr/bin/python3 '") + kScripts + "/make_corpus.py' '" + kVocab + "' '" +
             CorpusPath().string() + "' > /dev/null");
  std::vector<std::string> docs;
  std::ifstream in(CorpusPath());
  for (std::string line; std::getline(in, line);) {
    const linfer::tokenizer::Json r = linfer::tokenizer::Json::parse(line);
    if (r.contains("text")) docs.push_back(r.at("text").get<std::string>());
    if (r.contains("hex")) docs.push_back(absl::HexStringToBytes(r.at("hex").get<std::string>()));
  }
  return docs;
}

const std::vector<std::string>& Corpus() {
  static const auto* corpus = new std::vector<std::string>(LoadCorpus());
  return *corpus;
}

size_t CorpusBytes() {
  size_t n = 0;
  for (const std::string& d : Corpus()) n += d.size();
  return n;
}

const RwkvWorldVocab* Vocab() {
  static const RwkvWorldVocab* vocab = [] {
    absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> v = RwkvWorldVocab::FromFile(kVocab);
    return v.ok() ? v->release() : nullptr;
  }();
  return vocab;
}

// One pass over the corpus; returns the number of tokens.
size_t EncodeCorpus(const RwkvWorldVocab& vocab) {
  size_t tokens = 0;
  std::vector<int32_t> ids;
  for (const std::string& d : Corpus()) {
    ids.clear();
    benchmark::DoNotOptimize(vocab.Encode(d, &ids));
    tokens += ids.size();
  }
  return tokens;
}

void BM_Encode(benchmark::State& state) {
  if (Vocab() == nullptr || Corpus().empty()) {
    state.SkipWithError("vocabulary or corpus missing (is /usr/bin/python3 there?)");
    return;
  }
  EncodeCorpus(*Vocab());  // warm-up
  size_t tokens = 0;
  for (auto _ : state) tokens += EncodeCorpus(*Vocab());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * CorpusBytes()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_LoadVocab(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(RwkvWorldVocab::FromFile(kVocab));
}
BENCHMARK(BM_LoadVocab)->Unit(benchmark::kMillisecond);

void CompareWithReference() {
  if (Vocab() == nullptr || Corpus().empty()) return;
  EncodeCorpus(*Vocab());
  double best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    EncodeCorpus(*Vocab());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double ours = CorpusBytes() / 1e6 / best;
  const std::string output =
      RunCommand(std::string("/usr/bin/python3 '") + kScripts + "/reference.py' --bench '" +
                 kVocab + "' '" + CorpusPath().string() + "' 3");
  double reference = 0;
  std::printf("\nRWKV World encode, one thread, %.2f MB corpus (%zu records), best of 3:\n",
              CorpusBytes() / 1e6, Corpus().size());
  std::printf("  linfer (C++ trie)      %10.2f MB/s\n", ours);
  if (std::sscanf(output.c_str(), "{\"mbps\": %lf", &reference) == 1 && reference > 0) {
    std::printf("  Python reference       %10.2f MB/s   (linfer %.0fx)\n", reference,
                ours / reference);
  } else {
    std::printf("  Python reference       unavailable (%s)\n", output.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const char* no_ref = std::getenv("LINFER_BENCH_NO_REFERENCE");
  if (no_ref == nullptr || std::string(no_ref) != "1") CompareWithReference();
  std::filesystem::remove(CorpusPath());
  return 0;
}
