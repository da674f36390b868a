// A Hugging Face tokenizer.json tokenizer (BPE models) that produces exactly the ids of the
// reference `tokenizers` library, plus BOS/EOS metadata from tokenizer_config.json and
// generation_config.json. Immutable after loading; Encode/Decode are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/tokenizer/added_vocab.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/decoder.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/post_processor.h"
#include "models/tokenizer/pre_tokenizer.h"
#include "models/tokenizer/rwkv_world.h"

namespace linfer::tokenizer {

// Special-token metadata that lives outside tokenizer.json.
struct SpecialTokenConfig {
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;  // generation stops at any of these
  bool add_bos_token = false;    // tokenizer_config.json flags (informational)
  bool add_eos_token = false;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file, and tokenizer_config.json / generation_config.json from the
  // same directory when they exist.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // Loads DIR/tokenizer.json (a model directory), or DIR/rwkv_vocab_v20230424.txt when there is
  // no tokenizer.json (an RWKV World model).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  // An RWKV World tokenizer from its vocabulary file (see rwkv_world.h), with the two config
  // files beside it when they exist; BOS and EOS default to id 0 (<|endoftext|>). FromFile
  // takes this path for any *.txt file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromRwkvWorldFile(const std::string& path);
  // Builds from the text of tokenizer.json, and optionally of the two config files (empty when
  // absent).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      absl::string_view tokenizer_json, absl::string_view config_json = "",
      absl::string_view generation_json = "");

  // Text (UTF-8; InvalidArgument otherwise) -> ids. Added/special tokens written in the text are
  // always recognized; `add_special_tokens` runs the post-processor (BOS/EOS templates).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens = false) const;
  // Ids -> text. Unknown ids are skipped, as the reference does.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens = false) const;

  std::optional<int32_t> TokenToId(absl::string_view token) const;
  // The token string of `id`, or nullptr when there is none.
  const std::string* IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One past the largest id a token has (what a model's vocabulary must hold for every id the
  // tokenizer can give).
  int64_t id_end() const;

  // How Decode treats `id`: skipped (unknown id, or a special token when skipping them), a
  // <0xNN> token that the decoder joins with its neighbours (byte fallback), or anything else.
  enum class TokenKind { kSkipped, kFallbackByte, kOther };
  TokenKind KindForDecode(int32_t id, bool skip_special_tokens) const;
  const SpecialTokenConfig& special_tokens() const { return special_; }

  // The bytes each id in [0, n) adds to decoded text in the middle of a stream (structured
  // output's view of the vocabulary): raw bytes, so a token may hold part of a UTF-8 character.
  // A non-special added token is its content (Qwen's <tool_call>, </think>: the model writes them
  // as one token). nullopt for ids without a token, special tokens, and tokens whose bytes the
  // decoder does not make plain (a chain that is not ByteLevel alone, where such a token decodes to
  // U+FFFD or depends on its neighbours beyond a leading space).
  std::vector<std::optional<std::string>> TokenByteTable(int64_t n) const;

 private:
  Tokenizer() = default;
  absl::Status EncodeSegment(absl::string_view text, bool at_origin,
                             std::vector<int32_t>* ids) const;
  absl::Status ApplyConfig(absl::string_view config_json, absl::string_view generation_json);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  SpecialTokenConfig special_;
  // Set for RWKV World tokenizers, which use none of the members above but special_.
  std::unique_ptr<const RwkvWorldVocab> world_;
};

}  // namespace linfer::tokenizer
