// A per-request restriction of the tokens that may come next (structured output). The engine
// consults it on every sampled position of a request that has one: the sampler draws only from
// the allowed tokens (the rest of its semantics unchanged), and a stop token is allowed exactly
// when the constrained output is complete.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace linfer {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Whether `token` may come next (never for a stop token: the engine decides those by
  // Complete()).
  virtual bool Allows(int32_t token) = 0;
  // Sets bit t (allowed[t / 64] >> (t % 64)) of every token that may come next; the caller
  // zeroes `allowed` ([ceil(vocab / 64)] words) first.
  virtual void FillAllowed(absl::Span<uint64_t> allowed) = 0;
  // Moves past `token`, which Allows. Internal error when it does not fit (the constraint is then
  // unchanged).
  virtual absl::Status Advance(int32_t token) = 0;
  // Whether the output so far is a whole document: it may end here.
  virtual bool Complete() const = 0;
  // The same constraint at its start (another choice of the same request).
  virtual std::unique_ptr<TokenConstraint> Fresh() const = 0;
  // Whether it restricts nothing at this position: every token may come next and the output may
  // end here. The engine then samples as for a request without a constraint (its rows may be
  // pre-sampled on the device) and only Advances it past each token that is not a stop token.
  virtual bool Free() const { return false; }
  // A token that must come next whatever else restricts the output: the engine takes it without
  // sampling — the sampler's allowed ids, bad words, biases and min_tokens' bans, and the rule
  // that keeps stop tokens out of an incomplete output, do not apply (a stop token forced ends
  // the output, as a sampled one does) — with the raw row's logprobs. nullopt: none.
  virtual std::optional<int32_t> Forced() const { return std::nullopt; }
};

}  // namespace linfer
