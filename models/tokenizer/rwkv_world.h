// The RWKV "World" tokenizer: greedy longest match over a byte trie built from a vocabulary file
// such as rwkv_vocab_v20230424.txt (one `<id> <Python str or bytes literal> <byte length>` per
// line). Not BPE: no merges, no pre-tokenizer, no normalizer. Id 0 is <|endoftext|>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace linfer::tokenizer {

// The vocabulary file name that marks a model directory as using the World tokenizer.
inline constexpr char kRwkvWorldVocabFileName[] = "rwkv_vocab_v20230424.txt";
// The end-of-text / document-separator id; no vocabulary line may use it.
inline constexpr int32_t kRwkvWorldEndOfText = 0;

// Bounds that keep a hostile vocabulary file from allocating without limit. The published file
// is 1.1 MB with ids 1..65529 and tokens of at most 128 bytes.
inline constexpr int64_t kRwkvWorldMaxFileBytes = int64_t{32} << 20;
inline constexpr int32_t kRwkvWorldMaxId = (1 << 20) - 1;
inline constexpr size_t kRwkvWorldMaxTokenBytes = 1024;
inline constexpr size_t kRwkvWorldMaxTotalTokenBytes = size_t{8} << 20;

// Evaluates one Python string literal as the vocabulary file writes it: 'text', "text", u'text'
// (returned UTF-8 encoded) or b'bytes' / B'bytes'. Escapes: \\ \' \" \a \b \f \n \r \t \v,
// \ooo (octal, at most \377), \xhh, and in str literals \uXXXX and \UXXXXXXXX. Rejected, with
// InvalidArgument: other escapes (Python deprecates them), surrogate code points (not encodable
// as UTF-8), non-ASCII characters in bytes literals, raw/f/triple-quoted literals, implicit
// concatenation and anything after the closing quote. Leading and trailing blanks are ignored.
absl::StatusOr<std::string> ParsePythonStringLiteral(absl::string_view literal);

// Immutable after construction; every method is thread-safe.
class RwkvWorldVocab {
 public:
  // Parses vocabulary text. Errors are InvalidArgument and start with "`name`:<line>: ". Every
  // line must be `<id> <literal> <length>` with a decimal id in [1, kRwkvWorldMaxId], a literal
  // that ParsePythonStringLiteral accepts and that is not empty, and `length` equal to its byte
  // length; ids must be unique. Two ids may spell the same bytes: both decode, and encoding
  // produces the one on the later line (as the published tokenizer's dict does).
  static absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> FromText(absl::string_view text,
                                                                  absl::string_view name);
  // Reads and parses `path` (at most kRwkvWorldMaxFileBytes).
  static absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> FromFile(const std::string& path);

  // Appends the ids of `bytes` (any bytes; UTF-8 is not required) to `ids`: at each position the
  // longest vocabulary token that matches. InvalidArgument, naming the byte and its offset, when
  // no token starts with the byte at some position (impossible with the published file, which
  // has all 256 single bytes as ids 1..256); `ids` then holds the ids before that position.
  absl::Status Encode(absl::string_view bytes, std::vector<int32_t>* ids) const;

  // Concatenated token bytes of `ids`; ids without a token (0, unknown) contribute nothing.
  std::string DecodeBytes(absl::Span<const int32_t> ids) const;
  // DecodeBytes made valid UTF-8: one U+FFFD per maximal invalid subpart (Python's
  // bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy agree on this rule).
  std::string Decode(absl::Span<const int32_t> ids) const;

  // The bytes of `id`, or nullptr when no line defines it.
  const std::string* IdToToken(int32_t id) const;
  // The id that encoding gives `token` when it is one whole token.
  std::optional<int32_t> TokenToId(absl::string_view token) const;
  // One past the largest id (the embedding rows a model needs at least).
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t num_tokens() const { return num_tokens_; }

 private:
  RwkvWorldVocab() = default;
  // Parses one line into tokens_ / file_order_; `line_of_id` detects duplicate ids.
  absl::Status AddLine(absl::string_view line, std::vector<int32_t>* line_of_id,
                       int32_t line_number, size_t* total_bytes);
  // Builds the trie from tokens_ (see the layout below).
  void BuildTrie();
  // The child of `node` along `byte`, or 0 (the root is never a child).
  uint32_t Child(uint32_t node, uint8_t byte) const;

  std::vector<std::string> tokens_;  // [id_limit]; empty where no line defines the id
  std::vector<int32_t> file_order_;  // the defined ids in the order of their lines
  int32_t num_tokens_ = 0;
  // Byte trie in breadth-first order; node 0 is the root. The children of node n are the nodes
  // first_child_[n] .. first_child_[n] + num_children_[n] - 1, sorted by label_ (the byte on the
  // edge into them). token_[n] is the id spelled by the path to n, or -1.
  std::vector<uint32_t> first_child_;
  std::vector<uint16_t> num_children_;
  std::vector<uint8_t> label_;
  std::vector<int32_t> token_;
  uint32_t root_child_[256] = {};  // the root's children by byte (0 = none)
  // The nodes at depth 2 by their two bytes (0 = none): [65536]. The depth-1 nodes are
  // 1 .. depth2_start_ - 1, and their children are looked up here instead of by search.
  std::vector<uint32_t> depth2_;
  uint32_t depth2_start_ = 1;
};

}  // namespace linfer::tokenizer
