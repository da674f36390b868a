// ConstraintMaker: the shared token index and one JsonConstraint per request.
#include "server/constraint_maker.h"

#include <utility>

namespace linfer {

absl::StatusOr<std::shared_ptr<TokenConstraint>> ConstraintMaker::Make(
    const Engine& engine, const tokenizer::Tokenizer* tokenizer,
    std::shared_ptr<const structured::Grammar> grammar) {
  if (tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "structured output: this server has no tokenizer, so it cannot constrain the text");
  }
  const std::shared_ptr<const ByteTable> bytes = TokenBytes(engine, tokenizer);
  absl::call_once(once_, [&] { index_ = std::make_shared<const structured::TokenIndex>(*bytes); });
  return std::make_shared<structured::JsonConstraint>(std::move(grammar), index_);
}

std::shared_ptr<const ConstraintMaker::ByteTable> ConstraintMaker::TokenBytes(
    const Engine& engine, const tokenizer::Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return nullptr;
  absl::call_once(bytes_once_, [&] {
    bytes_ =
        std::make_shared<const ByteTable>(tokenizer->TokenByteTable(engine.model().vocab_size()));
  });
  return bytes_;
}

}  // namespace linfer
