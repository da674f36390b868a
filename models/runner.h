// One sequence through a model on its own one-slot state, for the CLI's logits and perplexity,
// tests and benchmarks (the engine batches many sequences over its slot pool instead).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/context.h"
#include "models/model.h"
#include "models/state.h"

namespace linfer {

class SequenceRunner {
 public:
  // batch_invariant: ExecContext::batch_invariant (any split of a sequence into Feeds gives the
  // same bits).
  explicit SequenceRunner(const Model* model, bool batch_invariant = false)
      : model_(model), arena_(model->device()), batch_invariant_(batch_invariant) {}
  absl::Status Init();  // allocates the (zeroed) one-slot state

  // Feeds `tokens` (≥ 1, ids in the vocabulary) from the current state. Returns host f32 logits:
  // [tokens, vocab] with options.all_logits, else [1, vocab] (the last token's).
  absl::StatusOr<Tensor> Feed(absl::Span<const int32_t> tokens, const ForwardOptions& options);

  int64_t position() const { return position_; }
  const ModelStates& states() const { return states_; }

 private:
  const Model* model_;
  Arena arena_;
  bool batch_invariant_;
  ModelStates states_;
  int64_t position_ = 0;
};

}  // namespace linfer
