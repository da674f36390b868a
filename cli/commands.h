// The `linfer` command-line subcommands. Each returns the process exit code; flags are absl
// flags (already parsed), `args` are the positional arguments after the subcommand.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/request.h"
#include "models/generation_config.h"
#include "models/model.h"
#include "models/tokenizer/tokenizer.h"

ABSL_DECLARE_FLAG(std::string, model);

namespace linfer::cli {

int Logits(const std::vector<std::string>& args);
int Generate(const std::vector<std::string>& args);
int Info(const std::vector<std::string>& args);
int Tokenize(const std::vector<std::string>& args);
int Serve(const std::vector<std::string>& args);
int Perplexity(const std::vector<std::string>& args);
int Detokenize(const std::vector<std::string>& args);
// Client commands (cmd_client.cc, cmd_sessions.cc): talk to the server at --server.
int GenerateRemote(const std::vector<std::string>& args);  // `generate` when --server is set
int Chat(const std::vector<std::string>& args);
int Sessions(const std::vector<std::string>& args);

// --model, else the bundled model (models/tiny next to the working directory or the binary, or
// /usr/share/linfer/models/tiny). NotFound names the places tried.
absl::StatusOr<std::string> ModelDir();

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when DIR has no tokenizer
  DetokenizerFactory detokenizer;                   // null without a tokenizer
  TextEncoder encoder;                              // null without a tokenizer
  GenerationDefaults defaults;                      // DIR/generation_config.json
};
// The model's device and dtypes from --device, --weight_dtype and --state_dtype (resolving auto,
// with a log line saying which device was picked and why).
absl::StatusOr<LoadOptions> LoadOptionsFromFlags();

// Loads DIR's model (device and dtypes from the flags, LoadOptionsFromFlags), its tokenizer
// (tokenizer.json, or an RWKV World vocabulary) when present, and its generation defaults.
absl::StatusOr<LoadedModel> LoadModelAndTokenizer(const std::string& dir);

// Comma-separated token ids ("1, 2,3"); errors name `what` (the flag) and the bad part.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text, absl::string_view what,
                                                   bool allow_empty = false);

// Prints "linfer: error: <message>" to stderr and returns 1.
int Fail(absl::string_view message);

}  // namespace linfer::cli
