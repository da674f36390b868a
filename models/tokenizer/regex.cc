// PCRE2 wrapper (see regex.h). Match data and the JIT stack are per thread.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizer/regex.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

// Oniguruma's \s is exactly the White_Space property; PCRE2's also has U+180E.
constexpr absl::string_view kSpaceBody = "\\t-\\r\\x{85}\\p{Z}";
constexpr absl::string_view kWordBody = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr absl::string_view kHexBody = "0-9a-fA-F";

// Per-thread PCRE2 scratch: match data (one pair is all we read) and a large JIT stack.
struct Scratch {
  Scratch() {
    match = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~Scratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(match);
  }
  pcre2_match_data* match;
  pcre2_jit_stack* stack;
  pcre2_match_context* context;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

std::string TranslateOnigPattern(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool in_class = class_depth > 0;
      if (e == 's' || e == 'w' || e == 'h') {
        const absl::string_view body = e == 's' ? kSpaceBody : e == 'w' ? kWordBody : kHexBody;
        absl::StrAppend(&out, in_class ? "" : "[", body, in_class ? "" : "]");
      } else if ((e == 'S' || e == 'W' || e == 'H') && !in_class) {
        const absl::string_view body = e == 'S' ? kSpaceBody : e == 'W' ? kWordBody : kHexBody;
        absl::StrAppend(&out, "[^", body, "]");
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern) {
  const std::string translated = TranslateOnigPattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("bad regex '", pattern, "' at offset ", offset,
                                                   ": ", reinterpret_cast<char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // Falls back to the interpreter if JIT fails.
  std::unique_ptr<Regex> re(new Regex());
  re->code_ = code;
  return re;
}

std::unique_ptr<Regex> Regex::Literal(absl::string_view text) {
  std::unique_ptr<Regex> re(new Regex());
  re->is_literal_ = true;
  re->literal_ = std::string(text);
  return re;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

absl::Status Regex::FindAll(absl::string_view text, std::vector<MatchSpan>* out) const {
  if (is_literal_) {
    if (literal_.empty()) return absl::OkStatus();
    size_t pos = 0;
    while ((pos = text.find(literal_, pos)) != absl::string_view::npos) {
      out->push_back({pos, pos + literal_.size()});
      pos += literal_.size();
    }
    return absl::OkStatus();
  }
  Scratch& scratch = ThreadScratch();
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_match_end = static_cast<size_t>(-1);
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, scratch.match,
                               scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::ResourceExhaustedError(absl::StrCat(
          "the tokenizer's regex gave up on this text (a pattern in tokenizer.json that "
          "backtracks too much; the text itself is fine): ",
          reinterpret_cast<char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match);
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && end == last_match_end) {
      if (pos >= text.size()) break;
      pos += Utf8SequenceLength(static_cast<unsigned char>(text[pos]));
      continue;
    }
    out->push_back({start, end});
    last_match_end = end;
    pos = end;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern,
                                                    absl::string_view context) {
  if (const Json* s = Find(pattern, "String"); s != nullptr && s->is_string()) {
    return Regex::Literal(s->get<std::string>());
  }
  if (const Json* r = Find(pattern, "Regex"); r != nullptr && r->is_string()) {
    return Regex::Compile(r->get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(context, ": pattern must be {\"String\": ...} or {\"Regex\": ...}"));
}

}  // namespace linfer::tokenizer
