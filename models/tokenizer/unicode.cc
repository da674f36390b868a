// ICU-backed Unicode properties and transforms (see unicode.h).
#include "models/tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

// Sink that appends ICU's UTF-8 output to a std::string.
class StringSink : public icu::ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  void Append(const char* bytes, int32_t n) override { out_->append(bytes, n); }

 private:
  std::string* out_;
};

absl::StatusOr<const icu::Normalizer2*> Instance(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      n = icu::Normalizer2::getNFCInstance(err);
      break;
    case NormalForm::kNfd:
      n = icu::Normalizer2::getNFDInstance(err);
      break;
    case NormalForm::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(err);
      break;
    case NormalForm::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(err);
      break;
  }
  if (U_FAILURE(err) || n == nullptr) {
    return absl::InternalError(absl::StrCat("ICU normalizer unavailable: ", u_errorName(err)));
  }
  return n;
}

// Below U+0300 (lead byte < 0xCC) nothing composes, decomposes or reorders under NFC; under the
// other forms only ASCII is guaranteed stable.
bool TriviallyNormalized(absl::string_view text, NormalForm form) {
  const unsigned char limit = form == NormalForm::kNfc ? 0xCC : 0x80;
  for (unsigned char c : text) {
    if (c >= limit) return false;
  }
  return true;
}

}  // namespace

bool IsWhitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool IsNumeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

bool IsWordChar(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int32_t mask = U_GET_GC_MASK(u);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool IsNonSpacingMark(char32_t c) {
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
}

absl::StatusOr<std::string> Normalize(absl::string_view text, NormalForm form) {
  if (TriviallyNormalized(text, form)) return std::string(text);
  absl::StatusOr<const icu::Normalizer2*> n = Instance(form);
  if (!n.ok()) return n.status();
  UErrorCode err = U_ZERO_ERROR;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if ((*n)->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  StringSink sink(&out);
  (*n)->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) {
    return absl::InternalError(absl::StrCat("ICU normalization failed: ", u_errorName(err)));
  }
  return out;
}

std::string Lowercase(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char b = text[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    int len = 0;
    const char32_t cp = DecodeUtf8(text, i, &len);
    i += len;
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(cp));
    UChar dst[8];
    UErrorCode err = U_ZERO_ERROR;
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &err);
    if (U_FAILURE(err)) {
      AppendUtf8(cp, &out);
      continue;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 c;
      U16_NEXT(dst, k, n, c);
      AppendUtf8(static_cast<char32_t>(c), &out);
    }
  }
  return out;
}

}  // namespace linfer::tokenizer
