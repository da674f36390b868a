// `linfer logits`, `linfer generate`, `linfer info`: run a model directory from the shell.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/sampling_flags.h"
#include "engine/engine.h"
#include "kernels/gemm.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "models/runner.h"

ABSL_FLAG(std::string, tokens, "", "Comma-separated input token ids, e.g. 1,2,3");
ABSL_FLAG(std::string, mode, "auto",
          "Recurrence form: auto (chunked for ≥ chunk-size tokens), chunked or recurrent");
ABSL_FLAG(int, chunk_size, 64, "Chunk size of the chunked form");

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
  absl::StatusOr<LoadOptions> options = LoadOptionsFromFlags();
  if (!options.ok()) return options.status();
  return Model::Load(*dir, *options);
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
  SequenceRunner runner(model->get());
  ForwardOptions options{*mode, absl::GetFlag(FLAGS_chunk_size), /*all_logits=*/true};
  absl::StatusOr<Tensor> logits = runner.Feed(*ids, options);
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
  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return Fail(dir.status().message());
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer(*dir);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  // A text prompt (positional) streams text; --tokens prints the generated ids as JSON.
  const bool text_mode = !args.empty();
  GenerateRequest req;
  if (text_mode) {
    if (loaded->tokenizer == nullptr) return Fail(absl::StrCat(*dir, " has no tokenizer"));
    absl::StatusOr<std::vector<int32_t>> ids = loaded->tokenizer->Encode(args[0], true);
    if (!ids.ok()) return Fail(ids.status().message());
    req.prompt = *std::move(ids);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseTokenIds(absl::GetFlag(FLAGS_tokens), "--tokens");
    if (!ids.ok()) return Fail(ids.status().message());
    req.prompt = *std::move(ids);
  }
  absl::Status st = FillSamplingFromFlags(loaded->defaults, &req);
  if (!st.ok()) return Fail(st.message());
  // The same path as the server: the engine (sampling, stop conditions, EOS, detokenisation).
  EngineOptions eo;
  eo.max_slots = 1;
  eo.state_memory_bytes = loaded->model->state_bytes();
  if (text_mode) {
    eo.detokenizer = loaded->detokenizer;
    eo.encoder = loaded->encoder;
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(std::move(loaded->model), eo);
  if (!engine.ok()) return Fail(engine.status().ToString());
  ClampDefaultMaxTokens((*engine)->options(), &req);
  std::vector<int32_t> generated;
  absl::Status final_status;
  absl::Notification done;
  absl::StatusOr<RequestId> id = (*engine)->Submit(std::move(req), [&](TokenEvent e) {
    if (e.token >= 0 && !(e.finish == Finish::kStop && e.stop_token)) generated.push_back(e.token);
    if (text_mode) {
      std::fputs(e.text.c_str(), stdout);
      std::fflush(stdout);
    }
    if (e.finish != Finish::kNone) {
      final_status = e.error;
      done.Notify();
    }
  });
  if (!id.ok()) return Fail(id.status().message());
  done.WaitForNotification();
  if (!final_status.ok()) return Fail(final_status.ToString());
  if (text_mode) {
    std::printf("\n");
    return 0;
  }
  std::printf("{\"tokens\":[");
  for (size_t i = 0; i < generated.size(); ++i) std::printf(i ? ",%d" : "%d", generated[i]);
  std::printf("]}\n");
  return 0;
}

namespace {

// The storage dtype of the model's state specs named `name` ("recurrent": the recurrences'
// states, "kv": the attention layers' keys and values), or "none" where it has none.
std::string SpecDType(const Model& model, absl::string_view name) {
  for (const LayerStateSpecs& layer : model.state_specs()) {
    for (const StateSpec& s : layer) {
      if (s.name == name) return absl::AsciiStrToLower(DTypeName(s.dtype));
    }
  }
  return "none";
}

}  // namespace

int Info(const std::vector<std::string>&) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel();
  if (!model.ok()) return Fail(model.status().ToString());
  const ModelConfig& c = (*model)->config();
  // Mixture-of-experts models: the experts, how many a token takes, and their width.
  const std::string moe =
      c.moe.experts == 0
          ? std::string()
          : absl::StrCat(",\"experts\":", c.moe.experts, ",\"experts_per_token\":", c.moe.top_k,
                         ",\"expert_intermediate_size\":", c.moe.intermediate,
                         ",\"shared_expert_intermediate_size\":", c.moe.shared_intermediate);
  // fp8 weights: the method (the checkpoint's, or fp8 for weights quantized on load), how they
  // are held, and how their scales apply.
  const Model& loaded = **model;
  const Fp8Scheme fp8 = loaded.quantized_on_load()
                            ? Fp8Scheme{Fp8Scheme::Strategy::kBlock, kFp8QuantizeBlock,
                                        kFp8QuantizeBlock, "_scale_inv"}
                            : c.quantization.fp8;
  const std::string quantization =
      loaded.quantization().empty()
          ? std::string()
          : absl::StrCat(",\"quantization\":\"", loaded.quantization(), "\",\"fp8_weights\":\"",
                         loaded.fp8_weights(), "\",\"fp8_scales\":\"", fp8.StrategyName(), "\"",
                         fp8.strategy == Fp8Scheme::Strategy::kBlock
                             ? absl::StrCat(",\"weight_block_size\":[", fp8.block_rows, ",",
                                            fp8.block_cols, "]")
                             : "");
  std::printf(
      "{\"model_type\":\"%s\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
      "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"parameters\":%lld,"
      "\"state_bytes_per_sequence\":%lld,\"kv_bytes_per_token\":%lld,"
      "\"max_position_embeddings\":%lld,\"device\":\"%s\",\"weight_dtype\":\"%s\","
      "\"weight_bytes\":%lld,\"state_dtype\":\"%s\",\"kv_dtype\":\"%s\",\"blas\":\"%s\"%s%s}\n",
      c.model_type.c_str(), static_cast<long long>(c.hidden_size),
      static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.vocab_size),
      static_cast<long long>(c.intermediate_size),
      static_cast<long long>((*model)->num_parameters()),
      static_cast<long long>((*model)->state_bytes()),
      static_cast<long long>(KvBytesPerToken((*model)->state_specs())),
      static_cast<long long>(c.max_position_embeddings),
      std::string(DeviceName((*model)->device())).c_str(),
      absl::AsciiStrToLower(DTypeName((*model)->matrix_dtype())).c_str(),
      static_cast<long long>((*model)->weight_bytes()), SpecDType(**model, "recurrent").c_str(),
      SpecDType(**model, "kv").c_str(), BlasCoreName().c_str(), moe.c_str(), quantization.c_str());
  return 0;
}

}  // namespace linfer::cli
