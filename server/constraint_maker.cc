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
  absl::call_once(once_, [&] {
    index_ = std::make_shared<const structured::TokenIndex>(
        tokenizer->TokenByteTable(engine.model().vocab_size()));
  });
  return std::make_shared<structured::JsonConstraint>(std::move(grammar), index_);
}

}  // namespace linfer
