// Pre-tokenizer implementations (see pre_tokenizer.h). Each one finds "matches" in a piece and
// keeps, drops or merges them by a split behavior, as the reference library's Pattern does.
#include "models/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/unicode.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<Behavior> ParseBehavior(const Json& j, Behavior fallback) {
  const std::string name = GetStringOr(j, "behavior", "");
  if (name.empty()) return fallback;
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("unknown split behavior \"", name, "\""));
}

struct Span {
  size_t start, end;
  bool flag;  // is_match before the behavior is applied; "remove" after.
};

// Cuts `piece` at `matches` (sorted, non-overlapping) and appends the kept, non-empty parts.
// The text is seen as alternating spans (the gaps between matches, and the matches), merged as
// `behavior` says, in one forward pass holding one span back: no per-span vectors, so a long
// piece (a 15 MB prompt is one) costs its output pieces and nothing more.
//   Contiguous: neighbours of the same kind merge. MergedWithPrevious: a match joins the span
//   before it unless that was a match. MergedWithNext: a match joins the span after it unless
//   that is a match. Removed: matches are dropped. Isolated: every span stands alone.
void SplitPiece(const Piece& piece, const std::vector<MatchSpan>& matches, bool invert,
                Behavior behavior, std::vector<Piece>* out) {
  const std::string& text = piece.text;
  auto emit = [&](const Span& s) {
    if (s.flag || s.start == s.end) return;
    out->push_back({text.substr(s.start, s.end - s.start), piece.at_origin && s.start == 0});
  };
  Span held{0, 0, false};  // the entry being built; `has_held` says whether there is one
  bool has_held = false, held_match = false;
  auto visit = [&](size_t start, size_t end, bool is_match) {
    bool merge = false;
    if (has_held) {
      switch (behavior) {
        case Behavior::kContiguous:
          merge = is_match == held_match;
          break;
        case Behavior::kMergedWithPrevious:
          merge = is_match && !held_match;
          break;
        // `held` is then a match alone (below, a non-match is never held back).
        case Behavior::kMergedWithNext:
          merge = held_match && !is_match;
          break;
        default:
          break;
      }
    }
    if (merge) {
      held.end = end;
      held_match = is_match;
      if (behavior == Behavior::kMergedWithNext) {  // match + the span after it: complete
        emit(held);
        has_held = false;
      }
      return;
    }
    if (has_held) emit(held);
    held = {start, end, behavior == Behavior::kRemoved && is_match};
    held_match = is_match;
    has_held = true;
    if (behavior == Behavior::kMergedWithNext && !is_match) {  // nothing merges into it
      emit(held);
      has_held = false;
    }
  };
  size_t prev = 0;
  for (const MatchSpan& m : matches) {
    if (prev != m.start) visit(prev, m.start, invert);
    visit(m.start, m.end, !invert);
    prev = m.end;
  }
  if (prev != text.size()) visit(prev, text.size(), invert);
  if (has_held) emit(held);
}

// Runs `find` on every piece and splits it.
absl::Status SplitAll(
    std::vector<Piece>* pieces, bool invert, Behavior behavior,
    const std::function<absl::Status(absl::string_view, std::vector<MatchSpan>*)>& find) {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 4);
  std::vector<MatchSpan> matches;
  for (const Piece& piece : *pieces) {
    matches.clear();
    RETURN_IF_ERROR(find(piece.text, &matches));
    // At most one part per match and per gap between them. Room for them up front, still
    // growing geometrically: one long piece (a whole prompt) then fills `out` without a
    // doubling's spare half.
    size_t most = out.size() + matches.size(), prev = 0;
    for (const MatchSpan& m : matches) {
      most += m.start != prev;
      prev = m.end;
    }
    most += prev != piece.text.size();
    if (most > out.capacity()) out.reserve(std::max(most, 2 * out.capacity()));
    SplitPiece(piece, matches, invert, behavior, &out);
  }
  *pieces = std::move(out);
  return absl::OkStatus();
}

// Every character satisfying `pred` is its own match.
void CharMatches(absl::string_view text, bool (*pred)(char32_t), std::vector<MatchSpan>* out) {
  for (size_t i = 0; i < text.size();) {
    int len = 0;
    const char32_t c = DecodeUtf8(text, i, &len);
    if (pred(c)) out->push_back({i, i + len});
    i += len;
  }
}

class CharSplit : public PreTokenizer {
 public:
  CharSplit(bool (*pred)(char32_t), Behavior behavior) : pred_(pred), behavior_(behavior) {}
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    return SplitAll(pieces, false, behavior_, [this](absl::string_view t, auto* m) {
      CharMatches(t, pred_, m);
      return absl::OkStatus();
    });
  }

 private:
  bool (*pred_)(char32_t);
  Behavior behavior_;
};

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> re, Behavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    return SplitAll(pieces, invert_, behavior_,
                    [this](absl::string_view t, auto* m) { return re_->FindAll(t, m); });
  }

 private:
  std::unique_ptr<Regex> re_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (!p.text.empty() && p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');
      }
    }
    if (re_ != nullptr) {
      RETURN_IF_ERROR(
          SplitAll(pieces, false, Behavior::kIsolated,
                   [this](absl::string_view t, auto* m) { return re_->FindAll(t, m); }));
    }
    if (map_bytes_) {
      for (Piece& p : *pieces) p.text = ByteLevelEncode(p.text);
    }
    return absl::OkStatus();
  }
  // A prefix space per piece (pieces are non-empty) and two bytes per byte character.
  double MaxGrowth() const override { return (add_prefix_space_ ? 2 : 1) * (map_bytes_ ? 2 : 1); }
  bool EndsWithByteLevel() const override { return true; }
  void DeferByteMapping() override { map_bytes_ = false; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null when use_regex is false
  bool map_bytes_ = true;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      std::string text;
      text.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') {
          text.append(replacement_);
        } else {
          text.push_back(c);
        }
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && p.at_origin))) {
        text.insert(0, replacement_);
      }
      p.text = std::move(text);
    }
    if (!split_) return absl::OkStatus();
    return SplitAll(pieces, false, Behavior::kMergedWithNext,
                    [this](absl::string_view t, std::vector<MatchSpan>* m) {
                      for (size_t pos = 0; (pos = t.find(replacement_, pos)) != t.npos;) {
                        m->push_back({pos, pos + replacement_.size()});
                        pos += replacement_.size();
                      }
                      return absl::OkStatus();
                    });
  }
  // Each space byte becomes the replacement, and a (non-empty) piece may get one in front.
  double MaxGrowth() const override { return 2.0 * replacement_.size(); }

 private:
  std::string replacement_;  // one character
  PrependScheme scheme_;
  bool split_;
};

// Whitespace: keeps runs of \w and runs of [^\w\s] (Rust regex classes), drops whitespace.
class WhitespacePre : public PreTokenizer {
 public:
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    return SplitAll(pieces, true, Behavior::kRemoved,
                    [](absl::string_view t, std::vector<MatchSpan>* m) {
                      int run = -1;  // 0: word run, 1: other run
                      for (size_t i = 0; i < t.size();) {
                        int len = 0;
                        const char32_t c = DecodeUtf8(t, i, &len);
                        const int cls = IsWordChar(c) ? 0 : IsWhitespace(c) ? -1 : 1;
                        if (cls >= 0 && cls == run) {
                          m->back().end = i + len;
                        } else if (cls >= 0) {
                          m->push_back({i, i + len});
                        }
                        run = cls;
                        i += len;
                      }
                      return absl::OkStatus();
                    });
  }
};

class BertPre : public PreTokenizer {
 public:
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    RETURN_IF_ERROR(CharSplit(IsWhitespace, Behavior::kRemoved).PreTokenize(pieces));
    return CharSplit(IsPunctuation, Behavior::kIsolated).PreTokenize(pieces);
  }
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->PreTokenize(pieces));
    return absl::OkStatus();
  }
  double MaxGrowth() const override {
    double growth = 1;
    for (const auto& step : steps_) growth *= step->MaxGrowth();
    return growth;
  }
  bool EndsWithByteLevel() const override {
    return !steps_.empty() && steps_.back()->EndsWithByteLevel();
  }
  void DeferByteMapping() override { steps_.back()->DeferByteMapping(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const Json& j) {
  // An empty replacement would be found at every position, forever.
  ASSIGN_OR_RETURN(std::string replacement,
                   GetCharOr(j, "replacement", "\u2581", "pre_tokenizer Metaspace"));
  const std::string scheme_name = GetStringOr(j, "prepend_scheme", "always");
  PrependScheme scheme = PrependScheme::kAlways;
  if (scheme_name == "first") scheme = PrependScheme::kFirst;
  if (scheme_name == "never") scheme = PrependScheme::kNever;
  if (!GetBoolOr(j, "add_prefix_space", true)) {
    if (scheme != PrependScheme::kNever && Find(j, "prepend_scheme") != nullptr) {
      return absl::InvalidArgumentError(
          "pre_tokenizer Metaspace: add_prefix_space does not match declared prepend_scheme");
    }
    scheme = PrependScheme::kNever;
  }
  return std::make_unique<MetaspacePre>(std::move(replacement), scheme,
                                        GetBoolOr(j, "split", true));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const Json& j) {
  const Json* pattern = Find(j, "pattern");
  if (pattern == nullptr) return absl::InvalidArgumentError("pre_tokenizer Split: no pattern");
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, ParsePattern(*pattern, "pre_tokenizer Split"));
  ASSIGN_OR_RETURN(const Behavior behavior, ParseBehavior(j, Behavior::kRemoved));
  return std::make_unique<RegexSplit>(std::move(re), behavior, GetBoolOr(j, "invert", false));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseByteLevel(const Json& j) {
  std::unique_ptr<Regex> re;
  if (GetBoolOr(j, "use_regex", true)) {
    ASSIGN_OR_RETURN(re, Regex::Compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                        "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"));
  }
  return std::make_unique<ByteLevelPre>(GetBoolOr(j, "add_prefix_space", true), std::move(re));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSequence(const Json& j) {
  const Json* list = Find(j, "pretokenizers");
  if (list == nullptr || !list->is_array()) {
    return absl::InvalidArgumentError("pre_tokenizer Sequence: missing \"pretokenizers\" array");
  }
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (const Json& item : *list) {
    ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step, ParsePreTokenizer(item));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequencePre>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseOne(const Json& j, const std::string& type) {
  if (type == "ByteLevel") return ParseByteLevel(j);
  if (type == "Split") return ParseSplit(j);
  if (type == "Metaspace") return ParseMetaspace(j);
  if (type == "Sequence") return ParseSequence(j);
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "WhitespaceSplit")
    return std::make_unique<CharSplit>(IsWhitespace, Behavior::kRemoved);
  if (type == "Digits") {
    return std::make_unique<CharSplit>(IsNumeric, GetBoolOr(j, "individual_digits", false)
                                                      ? Behavior::kIsolated
                                                      : Behavior::kContiguous);
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(const Behavior behavior, ParseBehavior(j, Behavior::kIsolated));
    return std::make_unique<CharSplit>(IsPunctuation, behavior);
  }
  if (type == "CharDelimiterSplit") {
    ASSIGN_OR_RETURN(const std::string delimiter,
                     GetString(j, "delimiter", "pre_tokenizer CharDelimiterSplit"));
    RETURN_IF_ERROR(GetCharOr(j, "delimiter", "", "pre_tokenizer CharDelimiterSplit").status());
    return std::make_unique<RegexSplit>(Regex::Literal(delimiter), Behavior::kRemoved, false);
  }
  return absl::UnimplementedError(absl::StrCat(
      "pre_tokenizer type \"", type,
      "\" is not supported (supported: ByteLevel, Split, Metaspace, Digits, Punctuation, "
      "Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, Sequence)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j) {
  ASSIGN_OR_RETURN(const std::string type, GetType(j, "pre_tokenizer"));
  ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> p, ParseOne(j, type));
  RETURN_IF_ERROR(CheckGrowth(p->MaxGrowth(), "pre_tokenizer " + type));
  return p;
}

}  // namespace linfer::tokenizer
