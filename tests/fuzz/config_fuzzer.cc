// Fuzz target: config.json text through ParseModelConfigText, the path LoadModelConfig takes.
// Whatever it accepts must satisfy the documented bounds.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "models/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<linfer::ModelConfig> c = linfer::ParseModelConfigText(text);
  if (!c.ok()) {
    Require(!c.status().message().empty(), "an error without a message");
    return 0;
  }
  Require(c->hidden_size >= 1 && c->hidden_size <= linfer::kMaxModelDim, "hidden_size bound");
  Require(c->intermediate_size >= 1 && c->intermediate_size <= linfer::kMaxModelDim,
          "intermediate_size bound");
  Require(c->num_hidden_layers >= 1 && c->num_hidden_layers <= linfer::kMaxModelLayers,
          "num_hidden_layers bound");
  Require(c->vocab_size >= 1 && c->vocab_size <= linfer::kMaxVocabSize, "vocab_size bound");
  Require(c->norm_eps >= 0 && c->norm_eps <= 1, "norm_eps bound");
  for (const auto& id : {c->bos_token_id, c->eos_token_id}) {
    Require(!id || (*id >= 0 && *id < c->vocab_size), "special token id bound");
  }
  Require(linfer::FamilyName(c->family) == c->model_type, "family matches model_type");
  return 0;
}
