// The engine's streaming detokenizer over a Hugging Face / RWKV tokenizer: complete UTF-8 per
// token, held-back bytes flushed at the end exactly as Decode renders them.
#pragma once

#include "engine/request.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer {

// A factory of per-stream detokenizers (special tokens skipped; the text continues the context's,
// tokenizer::IncrementalDecoder); `tokenizer` must outlive it.
DetokenizerFactory MakeDetokenizerFactory(const tokenizer::Tokenizer* tokenizer);
// Its encoder (no special tokens added); `tokenizer` must outlive it.
TextEncoder MakeTextEncoder(const tokenizer::Tokenizer* tokenizer);

}  // namespace linfer
