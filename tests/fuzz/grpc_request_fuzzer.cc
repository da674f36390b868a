// Fuzz target: the bytes of a linfer.v1.GenerateRequest through what Generation/Generate does
// before the engine runs it: the protobuf parse, ToEngineRequest (model check, session lookup,
// tokenization of a text prompt, token-id checks, EOS merge, generation defaults) and the
// engine's Submit validation of the sampling and stop settings. The server is a tiny random
// gated_deltanet (vocab 128) with a one-character-per-token tokenizer; session "s1" exists.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "linfer/v1/generation.pb.h"
#include "models/model.h"
#include "models/tokenizer/tokenizer.h"
#include "server/convert.h"
#include "server/service_context.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/testing/random_checkpoint.h"

namespace {

using linfer::fuzz::Require;

constexpr int64_t kVocab = 128;
constexpr int64_t kMaxPromptBytes = 4096;
const char kOwner[] = "fuzz-owner";

// tokenizer.json: id 0 is "\n", ids 1..95 the printable ASCII characters, no merges.
std::string CharTokenizerJson() {
  std::string vocab = R"("\n": 0)";
  for (int c = 32; c < 127; ++c) {
    std::string token(1, static_cast<char>(c));
    if (c == '"' || c == '\\') token = absl::StrCat("\\", token);
    absl::StrAppend(&vocab, ", \"", token, "\": ", c - 31);
  }
  return absl::StrCat(
      R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,)",
      R"( "post_processor": null, "decoder": {"type": "Fuse"},)",
      R"( "model": {"type": "BPE", "byte_fallback": false, "vocab": {)", vocab,
      R"(}, "merges": []}})");
}

struct Fixture {
  std::unique_ptr<linfer::Engine> engine;
  std::unique_ptr<linfer::tokenizer::Tokenizer> tokenizer;
  linfer::ServiceContext ctx;
};

// Built once; never destroyed (the engine thread runs until the process exits).
Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / "linfer-fuzz-grpc-request-model";
    linfer::testing_util::GdnShape shape;
    shape.hidden = 32;
    shape.layers = 1;
    shape.heads = 2;
    shape.head_dim = 16;
    shape.vocab = kVocab;
    Require(linfer::testing_util::WriteRandomGdnCheckpoint(dir, shape).ok(), "checkpoint");
    absl::StatusOr<std::unique_ptr<linfer::Model>> model = linfer::Model::Load(dir);
    Require(model.ok(), "the random checkpoint loads");
    linfer::EngineOptions eo;
    eo.state_memory_bytes = 1 << 20;
    eo.max_slots = 2;
    absl::StatusOr<std::unique_ptr<linfer::Engine>> engine =
        linfer::Engine::Create(*std::move(model), eo);
    Require(engine.ok(), "the engine starts");
    fx->engine = *std::move(engine);
    absl::StatusOr<std::unique_ptr<linfer::tokenizer::Tokenizer>> tok =
        linfer::tokenizer::Tokenizer::FromJson(CharTokenizerJson());
    Require(tok.ok(), "the character tokenizer loads");
    fx->tokenizer = *std::move(tok);
    Require(fx->engine->CreateSession("s1", kOwner).ok(), "session s1");
    fx->ctx.engine = fx->engine.get();
    fx->ctx.tokenizer = fx->tokenizer.get();
    fx->ctx.model_name = "tiny";
    fx->ctx.max_prompt_bytes = kMaxPromptBytes;
    fx->ctx.defaults.temperature = 0.7f;
    fx->ctx.defaults.top_k = 20;
    fx->ctx.defaults.max_new_tokens = 64;
    fx->ctx.defaults.eos_token_ids = {2, 7};
    return fx;
  }();
  return *f;
}

void CheckAccepted(const linfer::v1::GenerateRequest& in, const linfer::GenerateRequest& r) {
  Require(r.session_id == in.session_id() && r.owner == kOwner, "session and owner kept");
  Require(r.priority == in.priority(), "priority kept");
  for (int32_t id : r.prompt) Require(id >= 0 && id < kVocab, "prompt ids in the vocabulary");
  switch (in.prompt_case()) {
    case linfer::v1::GenerateRequest::kTokenIds:
      Require(std::equal(r.prompt.begin(), r.prompt.end(), in.token_ids().ids().begin(),
                         in.token_ids().ids().end()),
              "a token-id prompt is taken as given");
      break;
    case linfer::v1::GenerateRequest::kText:
      Require(static_cast<int64_t>(in.text().size()) <= kMaxPromptBytes, "prompt byte bound");
      break;
    case linfer::v1::GenerateRequest::PROMPT_NOT_SET:
      Require(!in.session_id().empty(), "no prompt is only accepted for a session");
      break;
  }
  Require(r.stop.eos_token_id.has_value() && *r.stop.eos_token_id == 2, "the model's EOS");
  if (!in.stop().has_max_tokens()) Require(r.stop.max_tokens == 64, "default max_tokens");
  if (!in.sampling().has_temperature()) Require(r.sampling.temperature == 0.7f, "default temp");
  if (!in.stop().ignore_eos()) {
    const auto& ids = r.stop.stop_token_ids;
    Require(std::find(ids.begin(), ids.end(), 7) != ids.end(), "generation_config EOS merged");
  }
  // What Engine::Submit checks must be defined on anything the conversion let through.
  (void)linfer::ValidateSamplingParams(r.sampling, kVocab);
  (void)linfer::ValidateStopParams(r.stop, kVocab);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  linfer::v1::GenerateRequest in;
  if (!in.ParseFromArray(data, static_cast<int>(size))) return 0;  // INVALID_ARGUMENT on the wire
  absl::StatusOr<linfer::GenerateRequest> r = linfer::ToEngineRequest(in, f.ctx, kOwner);
  if (!r.ok()) {
    Require(!r.status().message().empty(), "an error without a message");
    Require(r.status().message().size() <= 1024, "an error echoes unbounded client input");
    return 0;
  }
  CheckAccepted(in, *r);
  return 0;
}
