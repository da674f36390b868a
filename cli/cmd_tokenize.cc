// `linfer tokenize` and `linfer detokenize`: run a tokenizer.json from the shell.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "models/tokenizer/tokenizer.h"

ABSL_FLAG(std::string, tokenizer, "",
          "tokenizer.json file (default: tokenizer.json in the --model directory)");
ABSL_FLAG(bool, special, false,
          "tokenize: add the special tokens of the post-processor (e.g. BOS)");
ABSL_FLAG(bool, skip_special, false, "detokenize: leave special tokens out of the text");
ABSL_FLAG(std::string, ids, "", "detokenize: comma-separated token ids, e.g. 1,2,3");

namespace linfer::cli {
namespace {

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer() {
  const std::string file = absl::GetFlag(FLAGS_tokenizer);
  if (!file.empty()) return tokenizer::Tokenizer::FromFile(file);
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (!dir.empty()) return tokenizer::Tokenizer::FromDirectory(dir);
  return absl::InvalidArgumentError("give --tokenizer FILE or --model DIR");
}

}  // namespace

int Tokenize(const std::vector<std::string>& args) {
  std::string text;
  if (args.empty()) {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    text = absl::StrJoin(args, " ");
  }
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = LoadTokenizer();
  if (!tok.ok()) return Fail(tok.status().ToString());
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text, absl::GetFlag(FLAGS_special));
  if (!ids.ok()) return Fail(ids.status().ToString());
  std::printf("[%s]\n", absl::StrJoin(*ids, ",").c_str());
  return 0;
}

int Detokenize(const std::vector<std::string>&) {
  absl::StatusOr<std::vector<int32_t>> ids =
      ParseTokenIds(absl::GetFlag(FLAGS_ids), "--ids", /*allow_empty=*/true);
  if (!ids.ok()) return Fail(ids.status().message());
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = LoadTokenizer();
  if (!tok.ok()) return Fail(tok.status().ToString());
  for (size_t i = 0; i < ids->size(); ++i) {  // Decode would skip it without a word
    if ((*tok)->IdToToken((*ids)[i]) == nullptr && !(*tok)->IsSpecial((*ids)[i])) {
      return Fail(
          absl::StrCat("--ids[", i, "] = ", (*ids)[i], " is not a token of this tokenizer"));
    }
  }
  absl::StatusOr<std::string> text = (*tok)->Decode(*ids, absl::GetFlag(FLAGS_skip_special));
  if (!text.ok()) return Fail(text.status().ToString());
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace linfer::cli
