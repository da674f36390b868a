// Finding and loading the model directory (and its tokenizer) for the commands.
#include <unistd.h>

#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/status_macros.h"
#include "models/tokenizer/incremental_decoder.h"
#include "server/commands.h"

namespace linfer::cli {
namespace {

namespace fs = std::filesystem;

class StreamDecoder : public Detokenizer {
 public:
  explicit StreamDecoder(const tokenizer::Tokenizer* t) : decoder_(t, /*skip_special=*/true) {}
  std::string Push(int32_t token) override {
    absl::StatusOr<std::string> s = decoder_.Step(token);
    return s.ok() ? *std::move(s) : std::string();
  }
  std::string Flush() override {
    absl::StatusOr<std::string> s = decoder_.Finish();
    return s.ok() ? *std::move(s) : std::string();
  }

 private:
  tokenizer::IncrementalDecoder decoder_;
};

fs::path ExecutableDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

absl::StatusOr<std::string> ModelDir() {
  const std::string flag = absl::GetFlag(FLAGS_model);
  if (!flag.empty()) return flag;
  std::vector<fs::path> candidates = {
      fs::current_path() / "models/tiny", ExecutableDir() / "../../models/tiny",
      ExecutableDir() / "../share/linfer/models/tiny", "/usr/share/linfer/models/tiny"};
  std::vector<std::string> tried;
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::exists(p / "config.json", ec)) return fs::weakly_canonical(p, ec).string();
    tried.push_back(p.string());
  }
  return absl::NotFoundError(absl::StrCat("no --model given and no bundled model found (tried ",
                                          absl::StrJoin(tried, ", "), ")"));
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text, absl::string_view what,
                                                   bool allow_empty) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", part, "' is not an integer"));
    }
    ids.push_back(id);
  }
  if (ids.empty() && !allow_empty) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": give at least one token id"));
  }
  return ids;
}

absl::StatusOr<LoadedModel> LoadModelAndTokenizer(const std::string& dir) {
  LoadedModel out;
  ASSIGN_OR_RETURN(out.model, Model::Load(dir));
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "tokenizer.json", ec)) {
    ASSIGN_OR_RETURN(out.tokenizer, tokenizer::Tokenizer::FromDirectory(dir));
    const tokenizer::Tokenizer* t = out.tokenizer.get();
    out.detokenizer = [t] { return std::make_unique<StreamDecoder>(t); };
  }
  return out;
}

}  // namespace linfer::cli
