// Where the generated reference fixtures live: the build tree's testdata/<set> compiled into each
// test, or $LINFER_TESTDATA/<set> when that is set (a packed test binary run on another machine,
// tests/gpu/run_on_gpu.sh, generates the fixtures there).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace linfer::testing_util {

// `compiled` is the build-time path of one fixture set, e.g. ".../testdata/fla".
inline std::string FixtureSetDir(const char* compiled) {
  const char* env = std::getenv("LINFER_TESTDATA");
  if (env == nullptr || *env == '\0') return compiled;
  return (std::filesystem::path(env) / std::filesystem::path(compiled).filename()).string();
}

}  // namespace linfer::testing_util
