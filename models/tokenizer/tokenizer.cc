// Tokenizer construction and the encode / decode pipelines (see tokenizer.h):
// added tokens (raw) -> normalizer -> added tokens (normalized) -> pre-tokenizer -> BPE ->
// post-processor; decode: ids -> tokens -> decoder chain.
#include "models/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view tokenizer_json,
                                                               absl::string_view config_json,
                                                               absl::string_view generation_json) {
  ASSIGN_OR_RETURN(const Json j, ParseJson(tokenizer_json, "tokenizer.json"));
  if (!j.is_object()) return absl::InvalidArgumentError("tokenizer.json: not a JSON object");
  const Json* model = Find(j, "model");
  if (model == nullptr) return absl::InvalidArgumentError("tokenizer.json: no \"model\"");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(*model));
  if (const Json* n = Find(j, "normalizer")) {
    ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(*n));
  }
  if (const Json* p = Find(j, "pre_tokenizer")) {
    ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(*p));
  }
  if (const Json* p = Find(j, "post_processor")) {
    ASSIGN_OR_RETURN(t->post_processor_, ParsePostProcessor(*p));
  }
  if (const Json* d = Find(j, "decoder")) {
    ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(*d));
  }
  // "truncation" and "padding" are ignored: the engine manages sequence lengths itself.
  // A trailing ByteLevel step can hand raw bytes to the model instead of byte characters.
  if (t->pre_tokenizer_ != nullptr && t->pre_tokenizer_->EndsWithByteLevel() &&
      t->model_->EnableByteMode()) {
    t->pre_tokenizer_->DeferByteMapping();
  }
  ASSIGN_OR_RETURN(
      t->added_, AddedVocabulary::Build(Find(j, "added_tokens"), *t->model_, t->normalizer_.get()));
  if (t->post_processor_ != nullptr) {
    // Every id a template adds must decode: the reference would emit ids no model row has.
    std::vector<int32_t> ids;
    t->post_processor_->CollectIds(&ids);
    for (int32_t id : ids) {
      if (t->IdToToken(id) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "post_processor: token id ", id, " is not in the vocabulary or the added tokens"));
      }
    }
  }
  RETURN_IF_ERROR(t->ApplyConfig(config_json, generation_json));
  return t;
}

absl::Status Tokenizer::EncodeSegment(absl::string_view text, bool at_origin,
                                      std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) RETURN_IF_ERROR(normalizer_->Normalize(&normalized));
  std::vector<Segment> parts;
  added_.Split(normalized, /*normalized=*/true, &parts);
  std::vector<Piece> pieces;
  for (const Segment& part : parts) {
    if (part.id >= 0) {
      ids->push_back(part.id);
      continue;
    }
    pieces.clear();
    pieces.push_back(
        {normalized.substr(part.start, part.end - part.start), at_origin && part.start == 0});
    if (pre_tokenizer_ != nullptr) RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(&pieces));
    for (const Piece& piece : pieces) RETURN_IF_ERROR(model_->Tokenize(piece.text, ids));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens) const {
  RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (world_ != nullptr) {
    RETURN_IF_ERROR(world_->Encode(text, &ids));
    return ids;
  }
  std::vector<Segment> segments;
  added_.Split(text, /*normalized=*/false, &segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      RETURN_IF_ERROR(EncodeSegment(text.substr(s.start, s.end - s.start), s.start == 0, &ids));
    }
  }
  if (post_processor_ != nullptr) post_processor_->Process(&ids, add_special_tokens);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  if (world_ != nullptr) return world_->Decode(ids);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = IdToToken(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && added_.IsSpecial(*token)) continue;
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) return absl::StrJoin(tokens, " ");
  RETURN_IF_ERROR(decoder_->DecodeChain(&tokens));
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> Tokenizer::TokenToId(absl::string_view token) const {
  if (world_ != nullptr) return world_->TokenToId(token);
  if (std::optional<int32_t> id = added_.TokenToId(token)) return id;
  return model_->TokenToId(token);
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  if (world_ != nullptr) return world_->IdToToken(id);
  if (const AddedToken* added = added_.FindId(id)) return &added->content;
  return model_->IdToToken(id);
}

int64_t Tokenizer::id_end() const {
  if (world_ != nullptr) return world_->id_limit();
  return int64_t{std::max(added_.max_id(), model_->max_id())} + 1;
}

Tokenizer::TokenKind Tokenizer::KindForDecode(int32_t id, bool skip_special_tokens) const {
  const std::string* token = IdToToken(id);
  if (token == nullptr || (skip_special_tokens && added_.IsSpecial(*token))) {
    return TokenKind::kSkipped;
  }
  if (decoder_ != nullptr && decoder_->HasByteFallback() && FallbackByte(*token) >= 0) {
    return TokenKind::kFallbackByte;
  }
  return TokenKind::kOther;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (world_ != nullptr) return id == kRwkvWorldEndOfText;
  const AddedToken* added = added_.FindId(id);
  return added != nullptr && added_.IsSpecial(added->content);
}

}  // namespace linfer::tokenizer
