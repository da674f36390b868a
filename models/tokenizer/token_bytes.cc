// Tokenizer::TokenByteTable: the vocabulary as raw bytes. ByteLevel tokens map back through the
// byte alphabet; RWKV World tokens are bytes; ByteFallback's <0xNN> tokens are their byte; any
// other decoder chain is asked what a token adds after an anchor token (one ASCII letter or digit
// that decodes the same twice in a row), which keeps a word's leading space. Non-special added
// tokens are their content.
#include <cctype>

#include "absl/strings/match.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::tokenizer {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::vector<std::optional<std::string>> Tokenizer::TokenByteTable(int64_t n) const {
  std::vector<std::optional<std::string>> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (world_ != nullptr) {
    for (int64_t id = 0; id < n; ++id) {
      const auto i = static_cast<int32_t>(id);
      if (i == kRwkvWorldEndOfText) continue;
      if (const std::string* t = world_->IdToToken(i)) out[id] = *t;
    }
    return out;
  }
  if (decoder_ == nullptr) return out;  // tokens decode joined by spaces: no byte form
  const bool byte_level = decoder_->IsByteLevel();
  const bool fallback = decoder_->HasByteFallback();
  std::optional<int32_t> anchor;
  std::string anchor_text;
  for (int64_t id = 0; !byte_level && !anchor && id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (added_.FindId(i) != nullptr || model_->IdToToken(i) == nullptr) continue;
    absl::StatusOr<std::string> one = Decode({i});
    if (!one.ok() || one->size() != 1 || !std::isalnum(static_cast<unsigned char>((*one)[0]))) {
      continue;
    }
    absl::StatusOr<std::string> two = Decode({i, i});
    if (two.ok() && *two == *one + *one) {
      anchor = i;
      anchor_text = *one;
    }
  }
  for (int64_t id = 0; id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    // A non-special added token is text the model writes in one piece (Qwen's <tool_call>,
    // </think>; GPT-NeoX's runs of spaces): Decode sends its content through the decoder chain as
    // any token's, and so does this. Special ones never appear in text.
    const AddedToken* added = added_.FindId(i);
    if (added != nullptr && added_.IsSpecial(added->content)) continue;
    const std::string* token = added != nullptr ? &added->content : model_->IdToToken(i);
    if (token == nullptr) continue;
    if (byte_level) {
      std::string bytes;
      ByteLevelDecodeToken(*token, &bytes);
      out[id] = std::move(bytes);
      continue;
    }
    if (fallback) {
      if (const int b = FallbackByte(*token); b >= 0) {
        out[id] = std::string(1, static_cast<char>(b));
        continue;
      }
    }
    if (!anchor) continue;
    absl::StatusOr<std::string> text = Decode({*anchor, i});
    if (!text.ok() || !absl::StartsWith(*text, anchor_text)) continue;
    std::string rest = text->substr(anchor_text.size());
    if (absl::StrContains(rest, kReplacement) && !absl::StrContains(*token, kReplacement)) continue;
    out[id] = std::move(rest);
  }
  return out;
}

}  // namespace linfer::tokenizer
