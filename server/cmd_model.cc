// `linfer logits`, `linfer generate`, `linfer info`: run a model directory from the shell.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "engine/sampler.h"
#include "models/model.h"
#include "server/client.h"
#include "server/commands.h"

ABSL_FLAG(std::string, tokens, "", "Comma-separated input token ids, e.g. 1,2,3");
ABSL_FLAG(std::string, mode, "auto",
          "Recurrence form: auto (chunked for ≥ chunk-size tokens), chunked or recurrent");
ABSL_FLAG(int, chunk_size, 64, "Chunk size of the chunked form");
ABSL_FLAG(int, max_tokens, 16, "Tokens to generate");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 is greedy");
ABSL_DECLARE_FLAG(double, top_p);
ABSL_DECLARE_FLAG(int, top_k);
ABSL_DECLARE_FLAG(double, min_p);
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed (with --server, 0 lets the server pick one)");

namespace linfer::cli {
namespace {

absl::StatusOr<RecurrenceMode> ParseMode(const std::string& s) {
  if (s == "auto") return RecurrenceMode::kAuto;
  if (s == "chunked") return RecurrenceMode::kChunked;
  if (s == "recurrent") return RecurrenceMode::kRecurrent;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode must be auto, chunked or recurrent, got '", s, "'"));
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel() {
  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return dir.status();
  return Model::Load(*dir);
}

void PrintFloat(float x) {
  if (std::isfinite(x)) {
    std::printf("%.9g", x);
  } else {
    std::printf("null");
  }
}

}  // namespace

int Logits(const std::vector<std::string>&) {
  absl::StatusOr<std::vector<int32_t>> ids = ParseTokenIds(absl::GetFlag(FLAGS_tokens), "--tokens");
  if (!ids.ok()) return Fail(ids.status().message());
  absl::StatusOr<RecurrenceMode> mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return Fail(mode.status().message());
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel();
  if (!model.ok()) return Fail(model.status().ToString());
  SequenceState state = (*model)->NewState();
  ForwardOptions options{*mode, absl::GetFlag(FLAGS_chunk_size), /*all_logits=*/true};
  SequenceInput in{*ids, &state};
  absl::StatusOr<Tensor> logits = (*model)->Forward({&in, 1}, options);
  if (!logits.ok()) return Fail(logits.status().ToString());
  std::printf("{\"tokens\":[");
  for (size_t i = 0; i < ids->size(); ++i) std::printf(i ? ",%d" : "%d", (*ids)[i]);
  std::printf("],\"logits\":[");
  const int64_t v = logits->dim(1);
  for (int64_t r = 0; r < logits->dim(0); ++r) {
    std::printf(r ? ",[" : "[");
    for (int64_t j = 0; j < v; ++j) {
      if (j) std::printf(",");
      PrintFloat(logits->data<float>()[r * v + j]);
    }
    std::printf("]");
  }
  std::printf("]}\n");
  return 0;
}

int Generate(const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_server).empty()) return GenerateRemote(args);
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (max_tokens < 0) return Fail("--max_tokens must be ≥ 0");
  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return Fail(dir.status().message());
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer(*dir);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  // A text prompt (positional) streams text; --tokens prints the generated ids as JSON.
  const bool text_mode = !args.empty();
  std::vector<int32_t> prompt;
  if (text_mode) {
    if (loaded->tokenizer == nullptr) return Fail(absl::StrCat(*dir, " has no tokenizer.json"));
    absl::StatusOr<std::vector<int32_t>> ids = loaded->tokenizer->Encode(args[0], true);
    if (!ids.ok()) return Fail(ids.status().message());
    prompt = *std::move(ids);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseTokenIds(absl::GetFlag(FLAGS_tokens), "--tokens");
    if (!ids.ok()) return Fail(ids.status().message());
    prompt = *std::move(ids);
  }
  Model& model = *loaded->model;
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  sampling.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status st = ValidateSamplingParams(sampling, model.vocab_size()); !st.ok()) {
    return Fail(st.message());
  }
  Sampler sampler(sampling);
  std::unique_ptr<Detokenizer> detok = text_mode ? loaded->detokenizer() : nullptr;
  SequenceState state = model.NewState();
  std::vector<int32_t> input = prompt;
  std::vector<int32_t> generated;
  for (int i = 0; i < max_tokens; ++i) {
    SequenceInput in{input, &state};
    absl::StatusOr<Tensor> logits = model.Forward({&in, 1});
    if (!logits.ok()) return Fail(logits.status().ToString());
    const int32_t next =
        sampler
            .Sample({logits->data<float>(), static_cast<size_t>(logits->dim(1))}, prompt, generated)
            .token;
    generated.push_back(next);
    input = {next};
    const auto eos = model.config().eos_token_id;
    if (eos && next == *eos) break;
    if (detok) {
      std::fputs(detok->Push(next).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (detok) {
    std::printf("%s\n", detok->Flush().c_str());
    return 0;
  }
  std::printf("{\"tokens\":[");
  for (size_t i = 0; i < generated.size(); ++i) std::printf(i ? ",%d" : "%d", generated[i]);
  std::printf("]}\n");
  return 0;
}

int Info(const std::vector<std::string>&) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel();
  if (!model.ok()) return Fail(model.status().ToString());
  const ModelConfig& c = (*model)->config();
  std::printf(
      "{\"model_type\":\"%s\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
      "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"parameters\":%lld,"
      "\"state_bytes_per_sequence\":%lld}\n",
      c.model_type.c_str(), static_cast<long long>(c.hidden_size),
      static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.vocab_size),
      static_cast<long long>(c.intermediate_size),
      static_cast<long long>((*model)->num_parameters()),
      static_cast<long long>((*model)->state_bytes()));
  return 0;
}

}  // namespace linfer::cli
