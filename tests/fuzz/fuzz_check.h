// Invariant checks for the fuzz harnesses: a violated invariant aborts with a message, which
// libFuzzer (and the corpus replay test) reports as a crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace linfer::fuzz {

inline void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

}  // namespace linfer::fuzz
