// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing, ByteLevel,
// RobertaProcessing, BertProcessing and Sequence. They add BOS/EOS-style special tokens around
// a single encoded sequence when special tokens are requested.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one sequence; `add_special_tokens` says whether to add any.
  virtual void Process(std::vector<int32_t>* ids, bool add_special_tokens) const = 0;
  // Appends every id this post-processor may add (the tokenizer checks that it knows them).
  virtual void CollectIds(std::vector<int32_t>* ids) const = 0;
};

// Builds the post-processor described by `j` (a tokenizer.json "post_processor" object). Ids
// must be integers in [0, INT32_MAX].
absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& j);

}  // namespace linfer::tokenizer
