// Normalizer implementations (see normalizer.h), matching the reference library's semantics.
#include "models/tokenizer/normalizer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/unicode.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  absl::Status Normalize(std::string* text) const override {
    ASSIGN_OR_RETURN(*text, tokenizer::Normalize(*text, form_));
    return absl::OkStatus();
  }
  // UAX #15 §9: the largest expansion of UTF-8 text is 3x for NFC / NFD, 11x for NFKC / NFKD.
  double MaxGrowth() const override {
    return form_ == NormalForm::kNfc || form_ == NormalForm::kNfd ? 3 : 11;
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    *text = Lowercase(*text);
    return absl::OkStatus();
  }
  // U+0130 (2 bytes) -> "i" U+0307 (3 bytes) is the largest expansion.
  double MaxGrowth() const override { return 1.5; }
};

// Strips leading / trailing White_Space characters.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string* text) const override {
    size_t begin = 0, end = text->size();
    while (left_ && begin < end) {
      int len = 0;
      if (!IsWhitespace(DecodeUtf8(*text, begin, &len))) break;
      begin += len;
    }
    while (right_ && end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80) --start;
      int len = 0;
      if (!IsWhitespace(DecodeUtf8(*text, start, &len))) break;
      end = start;
    }
    *text = text->substr(begin, end - begin);
    return absl::OkStatus();
  }

 private:
  bool left_, right_;
};

// Removes non-spacing marks (meant to follow NFD / NFKD).
class StripAccentsNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    for (size_t i = 0; i < text->size();) {
      int len = 0;
      const char32_t c = DecodeUtf8(*text, i, &len);
      if (!IsNonSpacingMark(c)) out.append(*text, i, len);
      i += len;
    }
    *text = std::move(out);
    return absl::OkStatus();
  }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
    return absl::OkStatus();
  }
  // Once per non-empty text, and the encoder normalizes every segment between added tokens.
  double MaxGrowth() const override { return 1.0 + prefix_.size(); }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content, double growth)
      : pattern_(std::move(pattern)), content_(std::move(content)), growth_(growth) {}
  double MaxGrowth() const override { return growth_; }
  absl::Status Normalize(std::string* text) const override {
    std::vector<MatchSpan> matches;
    RETURN_IF_ERROR(pattern_->FindAll(*text, &matches));
    if (matches.empty()) return absl::OkStatus();
    std::string out;
    out.reserve(text->size() + matches.size() * content_.size());
    size_t last = 0;
    for (const MatchSpan& m : matches) {
      out.append(*text, last, m.start - last);
      out.append(content_);
      last = m.end;
    }
    out.append(*text, last, std::string::npos);
    *text = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
  double growth_;
};

// Maps every byte to its byte-level character (the GPT-2 alphabet).
class ByteLevelNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    *text = ByteLevelEncode(*text);
    return absl::OkStatus();
  }
  double MaxGrowth() const override { return 2; }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->Normalize(text));
    return absl::OkStatus();
  }
  double MaxGrowth() const override {
    double growth = 1;
    for (const auto& step : steps_) growth *= step->MaxGrowth();
    return growth;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> ParseSequence(const Json& j) {
  const Json* list = Find(j, "normalizers");
  if (list == nullptr || !list->is_array()) {
    return absl::InvalidArgumentError("normalizer Sequence: missing \"normalizers\" array");
  }
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (const Json& item : *list) {
    ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> step, ParseNormalizer(item));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseReplace(const Json& j) {
  const Json* pattern = Find(j, "pattern");
  if (pattern == nullptr) return absl::InvalidArgumentError("normalizer Replace: no pattern");
  const Json* literal = Find(*pattern, "String");
  if (literal != nullptr && literal->is_string() &&
      literal->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError("normalizer Replace: \"pattern\" is an empty String");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, ParsePattern(*pattern, "normalizer Replace"));
  ASSIGN_OR_RETURN(std::string content, GetString(j, "content", "normalizer Replace"));
  // As for the Replace decoder: a literal match turns into content, a regex may also match the
  // empty string once at every position.
  const double growth = literal != nullptr
                            ? std::max(1.0, static_cast<double>(content.size()) /
                                                literal->get_ref<const std::string&>().size())
                            : 1.0 + content.size();
  return std::make_unique<ReplaceNormalizer>(std::move(re), std::move(content), growth);
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseOne(const Json& j, const std::string& type) {
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(GetBoolOr(j, "strip_left", true),
                                             GetBoolOr(j, "strip_right", true));
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, GetString(j, "prepend", "normalizer Prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") return ParseReplace(j);
  if (type == "Sequence") return ParseSequence(j);
  return absl::UnimplementedError(
      absl::StrCat("normalizer type \"", type,
                   "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                   "StripAccents, Prepend, Replace, ByteLevel, Sequence)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j) {
  ASSIGN_OR_RETURN(const std::string type, GetType(j, "normalizer"));
  ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> n, ParseOne(j, type));
  RETURN_IF_ERROR(CheckGrowth(n->MaxGrowth(), "normalizer " + type));
  return n;
}

}  // namespace linfer::tokenizer
