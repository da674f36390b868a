// `linfer perplexity --model DIR FILE`: held-out loss and bits per byte of a text file, scored as
// one sequence [BOS, t_0 … t_{n-2}] → [t_0 … t_{n-1}] with the state carried across segments
// (exact for a recurrent model, however long the file), next to the file's own token-unigram
// baseline.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "models/runner.h"

ABSL_FLAG(int, segment, 512, "Tokens per forward call (the state carries over between them)");

namespace linfer::cli {
namespace {

constexpr int64_t kMaxTextBytes = int64_t{1} << 30;  // held-out text, tokenized whole

// Σ −log softmax(row)[target] over the rows of logits [rows, vocab].
double Nll(const Tensor& logits, const std::vector<int32_t>& targets, size_t first) {
  // Host f32 logits (SequenceRunner downloads them).
  const int64_t v = logits.dim(1);
  double total = 0;
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    const float* row = logits.data<float>() + r * v;
    double mx = row[0];
    for (int64_t j = 1; j < v; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    total += mx + std::log(sum) - row[targets[first + r]];
  }
  return total;
}

}  // namespace

int Perplexity(const std::vector<std::string>& args) {
  if (args.size() != 1) return Fail("usage: linfer perplexity --model DIR FILE");
  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return Fail(dir.status().message());
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer(*dir);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  if (loaded->tokenizer == nullptr) return Fail(absl::StrCat(*dir, " has no tokenizer"));
  absl::StatusOr<std::string> text_or = ReadFile(args[0], kMaxTextBytes, FileKinds::kAlsoStreams);
  if (!text_or.ok()) return Fail(text_or.status().message());
  const std::string text = *std::move(text_or);
  absl::StatusOr<std::vector<int32_t>> ids = loaded->tokenizer->Encode(text, false);
  if (!ids.ok()) return Fail(absl::StrCat(args[0], ": ", ids.status().message()));
  if (ids->empty()) return Fail(absl::StrCat(args[0], " has no tokens"));
  Model& model = *loaded->model;
  std::optional<int64_t> bos = model.config().bos_token_id;
  if (!bos && loaded->tokenizer->special_tokens().bos_id) {
    bos = *loaded->tokenizer->special_tokens().bos_id;
  }
  if (!bos) return Fail("the model has no bos_token_id to start the sequence with");
  std::vector<int32_t> inputs = {static_cast<int32_t>(*bos)};
  inputs.insert(inputs.end(), ids->begin(), ids->end() - 1);
  const int segment = std::max(1, absl::GetFlag(FLAGS_segment));
  SequenceRunner runner(&model);
  double nats = 0;
  for (size_t s = 0; s < inputs.size(); s += segment) {
    const size_t n = std::min<size_t>(segment, inputs.size() - s);
    absl::StatusOr<Tensor> logits =
        runner.Feed({inputs.data() + s, n}, {RecurrenceMode::kAuto, 64, true});
    if (!logits.ok()) return Fail(logits.status().ToString());
    nats += Nll(*logits, *ids, s);
  }
  std::map<int32_t, int64_t> counts;
  for (int32_t t : *ids) ++counts[t];
  double unigram = 0;
  for (const auto& [t, c] : counts) unigram -= c * std::log(static_cast<double>(c) / ids->size());
  const double bytes = static_cast<double>(text.size());
  std::printf(
      "{\"file\":\"%s\",\"bytes\":%zu,\"tokens\":%zu,\"loss\":%.6f,\"perplexity\":%.4f,"
      "\"bits_per_byte\":%.6f,\"unigram_bits_per_byte\":%.6f}\n",
      args[0].c_str(), text.size(), ids->size(), nats / ids->size(), std::exp(nats / ids->size()),
      nats / std::log(2.0) / bytes, unigram / std::log(2.0) / bytes);
  return 0;
}

}  // namespace linfer::cli
