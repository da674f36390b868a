// The `linfer` command-line subcommands. Each returns the process exit code; flags are absl
// flags (already parsed), `args` are the positional arguments after the subcommand.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"

ABSL_DECLARE_FLAG(std::string, model);

namespace linfer::cli {

int Logits(const std::vector<std::string>& args);
int Generate(const std::vector<std::string>& args);
int Info(const std::vector<std::string>& args);

// Prints "linfer: error: <message>" to stderr and returns 1.
int Fail(absl::string_view message);

}  // namespace linfer::cli
