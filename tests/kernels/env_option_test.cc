// EnvOption (kernels/cuda/env_option.h): the CUDA kernels' A/B switches take one of their listed
// values, and fall back to the first (the default) when unset, empty or misspelt.
#include "kernels/cuda/env_option.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace linfer::cuda {
namespace {

constexpr char kVar[] = "LINFER_ENV_OPTION_TEST";

TEST(EnvOptionTest, ListedValuesOrTheDefault) {
  unsetenv(kVar);
  EXPECT_EQ(EnvOption(kVar, {"plain", "pipelined"}), "plain");
  setenv(kVar, "", 1);
  EXPECT_EQ(EnvOption(kVar, {"plain", "pipelined"}), "plain");
  setenv(kVar, "pipelined", 1);
  EXPECT_EQ(EnvOption(kVar, {"plain", "pipelined"}), "pipelined");
  setenv(kVar, "plain", 1);
  EXPECT_EQ(EnvOption(kVar, {"plain", "pipelined"}), "plain");
  // Garbage, a near miss and a prefix: the default (with a warning).
  for (const char* bad : {"Pipelined", "pipeline", "pipelined ", "1", "\xff\xfe"}) {
    setenv(kVar, bad, 1);
    EXPECT_EQ(EnvOption(kVar, {"plain", "pipelined"}), "plain") << bad;
  }
  unsetenv(kVar);
}

}  // namespace
}  // namespace linfer::cuda
