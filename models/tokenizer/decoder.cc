// Decoder implementations (see decoder.h), mirroring the reference library's decode_chain.
#include "models/tokenizer/decoder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

class ByteLevelDecoder : public Decoder {
 public:
  // A two-byte character may stand for a byte that is invalid alone: U+FFFD, three bytes.
  double MaxGrowth() const override { return 1.5; }
  bool IsByteLevel() const override { return true; }
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) ByteLevelDecodeToken(t, &bytes);
    tokens->assign(1, LossyUtf8(bytes));
    return absl::OkStatus();
  }
};

}  // namespace

// Byte value of a "<0xNN>" token (Rust u8::from_str_radix also takes a leading '+'), or -1.
int FallbackByte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (t[3] == '+') return hex(t[4]);
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

namespace {

class ByteFallbackDecoder : public Decoder {
 public:
  bool HasByteFallback() const override { return true; }
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (ValidateUtf8(pending).ok()) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (std::string& t : *tokens) {
      const int b = FallbackByte(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
    return absl::OkStatus();
  }
};

class FuseDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string joined;
    for (const std::string& t : *tokens) joined += t;
    tokens->assign(1, std::move(joined));
    return absl::OkStatus();
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] =
          absl::StrReplaceAll((*tokens)[i], {{replacement_, i == 0 && strip_first_ ? "" : " "}});
    }
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token
// (the loops end at the token's ends, whatever the counts).
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, uint64_t start, uint64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      size_t begin = 0, end = t.size();
      for (uint64_t i = 0;
           i < start_ && begin < t.size() && t.compare(begin, content_.size(), content_) == 0;
           ++i) {
        begin += content_.size();
      }
      for (uint64_t i = 0; i < stop_ && end >= begin + content_.size() &&
                           t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
    return absl::OkStatus();
  }

 private:
  std::string content_;  // one character
  uint64_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content, double growth)
      : pattern_(std::move(pattern)), content_(std::move(content)), growth_(growth) {}
  double MaxGrowth() const override { return growth_; }
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<MatchSpan> matches;
    for (std::string& t : *tokens) {
      matches.clear();
      RETURN_IF_ERROR(pattern_->FindAll(t, &matches));
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const MatchSpan& m : matches) {
        out.append(t, last, m.start - last);
        out.append(content_);
        last = m.end;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
  double growth_;
};

// BPEDecoder: the word suffix becomes a space, except in the last token.
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] =
          absl::StrReplaceAll((*tokens)[i], {{suffix_, i + 1 == tokens->size() ? "" : " "}});
    }
    return absl::OkStatus();
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->DecodeChain(tokens));
    return absl::OkStatus();
  }
  double MaxGrowth() const override {
    double growth = 1;
    for (const auto& step : steps_) growth *= step->MaxGrowth();
    return growth;
  }
  bool HasByteFallback() const override {
    return std::any_of(steps_.begin(), steps_.end(),
                       [](const auto& step) { return step->HasByteFallback(); });
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<std::unique_ptr<Decoder>> ParseSequence(const Json& j) {
  const Json* list = Find(j, "decoders");
  if (list == nullptr || !list->is_array()) {
    return absl::InvalidArgumentError("decoder Sequence: missing \"decoders\" array");
  }
  std::vector<std::unique_ptr<Decoder>> steps;
  for (const Json& item : *list) {
    ASSIGN_OR_RETURN(std::unique_ptr<Decoder> step, ParseDecoder(item));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseMetaspace(const Json& j) {
  ASSIGN_OR_RETURN(std::string replacement,
                   GetCharOr(j, "replacement", "\u2581", "decoder Metaspace"));
  bool strip_first = GetStringOr(j, "prepend_scheme", "always") != "never";
  if (!GetBoolOr(j, "add_prefix_space", true)) strip_first = false;
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), strip_first);
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseStrip(const Json& j) {
  // Empty content matched forever; the reference reads one char and two usize counts.
  if (Find(j, "content") == nullptr) {
    return absl::InvalidArgumentError("decoder Strip: missing \"content\"");
  }
  ASSIGN_OR_RETURN(std::string content, GetCharOr(j, "content", "", "decoder Strip"));
  ASSIGN_OR_RETURN(const uint64_t start, GetCountOr(j, "start", 0, "decoder Strip"));
  ASSIGN_OR_RETURN(const uint64_t stop, GetCountOr(j, "stop", 0, "decoder Strip"));
  return std::make_unique<StripDecoder>(std::move(content), start, stop);
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseReplace(const Json& j) {
  const Json* pattern = Find(j, "pattern");
  if (pattern == nullptr) return absl::InvalidArgumentError("decoder Replace: no pattern");
  const Json* literal = Find(*pattern, "String");
  if (literal != nullptr && literal->is_string() &&
      literal->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError("decoder Replace: \"pattern\" is an empty String");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, ParsePattern(*pattern, "decoder Replace"));
  ASSIGN_OR_RETURN(std::string content, GetString(j, "content", "decoder Replace"));
  // Matches do not overlap: a literal of n bytes turns into content.size() bytes; a regex may
  // match the empty string, once at every position.
  const double growth = literal != nullptr
                            ? std::max(1.0, static_cast<double>(content.size()) /
                                                literal->get_ref<const std::string&>().size())
                            : 1.0 + content.size();
  return std::make_unique<ReplaceDecoder>(std::move(re), std::move(content), growth);
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseOne(const Json& j, const std::string& type) {
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Metaspace") return ParseMetaspace(j);
  if (type == "Sequence") return ParseSequence(j);
  if (type == "BPEDecoder") {
    const std::string suffix = GetStringOr(j, "suffix", "</w>");
    if (suffix.empty())
      return absl::InvalidArgumentError("decoder BPEDecoder: \"suffix\" is empty");
    return std::make_unique<BpeSuffixDecoder>(suffix);
  }
  if (type == "Strip") return ParseStrip(j);
  if (type == "Replace") return ParseReplace(j);
  return absl::UnimplementedError(absl::StrCat(
      "decoder type \"", type,
      "\" is not supported (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, "
      "BPEDecoder, Sequence)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j) {
  ASSIGN_OR_RETURN(const std::string type, GetType(j, "decoder"));
  ASSIGN_OR_RETURN(std::unique_ptr<Decoder> d, ParseOne(j, type));
  RETURN_IF_ERROR(CheckGrowth(d->MaxGrowth(), "decoder " + type));
  return d;
}

}  // namespace linfer::tokenizer
