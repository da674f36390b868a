// Structured output's token masks: a Grammar's matcher run over the vocabulary's byte strings.
//
// TokenIndex holds every token's bytes once per model (ids without bytes, special and added tokens
// never appear in structured output), grouped by first byte, and the "plain" tokens: those a free
// JSON string takes whole from a clean UTF-8 boundary without ending or escaping (most of a
// vocabulary). A mask then costs: inside a free string, one pass over the plain tokens' lengths
// plus a matcher walk of the other tokens; elsewhere, a matcher walk of the tokens whose first
// byte the matcher takes (a copy of the matcher, ~16 bytes a frame, and their bytes until one is
// refused).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "engine/token_constraint.h"

namespace linfer::structured {

class TokenIndex {
 public:
  // bytes[id]: the bytes token `id` adds to the text mid-stream; nullopt or empty: never allowed.
  explicit TokenIndex(std::vector<std::optional<std::string>> bytes);

  int64_t vocab() const { return static_cast<int64_t>(bytes_.size()); }
  bool usable(int32_t id) const {
    return id >= 0 && id < vocab() && !bytes_[static_cast<size_t>(id)].empty();
  }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& by_first(uint8_t b) const { return by_first_[b]; }
  // Plain tokens (see above) and the characters each adds.
  const std::vector<int32_t>& plain() const { return plain_; }
  const std::vector<int32_t>& plain_chars() const { return plain_chars_; }
  bool is_plain(int32_t id) const { return is_plain_[static_cast<size_t>(id)]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<std::vector<int32_t>> by_first_;  // [256]
  std::vector<int32_t> plain_, plain_chars_;
  std::vector<bool> is_plain_;
};

class JsonConstraint : public TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenIndex> index);

  bool Allows(int32_t token) override;
  void FillAllowed(absl::Span<uint64_t> allowed) override;
  absl::Status Advance(int32_t token) override;
  bool Complete() const override { return matcher_.Complete(); }
  std::unique_ptr<TokenConstraint> Fresh() const override;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenIndex> index_;
  JsonMatcher matcher_, scratch_;
};

}  // namespace linfer::structured
