// Detokenizer over tokenizer::IncrementalDecoder.
#include "engine/detokenizer.h"

#include <memory>
#include <string>

#include "models/tokenizer/incremental_decoder.h"

namespace linfer {
namespace {

class StreamDecoder : public Detokenizer {
 public:
  StreamDecoder(const tokenizer::Tokenizer* t, absl::Span<const int32_t> context)
      : decoder_(t, /*skip_special=*/true, context) {}
  std::string Push(int32_t token) override {
    absl::StatusOr<std::string> s = decoder_.Step(token);
    return s.ok() ? *std::move(s) : std::string();
  }
  std::string Flush() override {
    absl::StatusOr<std::string> s = decoder_.Finish();
    return s.ok() ? *std::move(s) : std::string();
  }
  bool Settled() const override { return decoder_.settled(); }

 private:
  tokenizer::IncrementalDecoder decoder_;
};

}  // namespace

DetokenizerFactory MakeDetokenizerFactory(const tokenizer::Tokenizer* tokenizer) {
  return [tokenizer](absl::Span<const int32_t> context) {
    return std::make_unique<StreamDecoder>(tokenizer, context);
  };
}

TextEncoder MakeTextEncoder(const tokenizer::Tokenizer* tokenizer) {
  return [tokenizer](absl::string_view text) { return tokenizer->Encode(text, false); };
}

}  // namespace linfer
