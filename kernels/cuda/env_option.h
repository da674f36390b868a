// The CUDA kernels' environment switches (LINFER_CUDA_ATTENTION, LINFER_CUDA_SCAN,
// LINFER_CUDA_SCAN_TILE, LINFER_CUDA_STEP, LINFER_CUDA_STEP_BF16, LINFER_CUDA_GEMV,
// LINFER_CUDA_GEMV_COLS, LINFER_CUDA_GEMM_TUNE, LINFER_CUDA_ASYNC_SNAPSHOTS, LINFER_CUDA_PDL,
// LINFER_CUDA_BF16_INPUTS, LINFER_CUDA_DECODE_ATTENTION, LINFER_CUDA_MOE, LINFER_CUDA_FP8):
// A/B choices between kernel variants and paths, read once per process by their call sites.
#pragma once

#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"

namespace linfer::cuda {

// The value of environment variable `name` among `values`; the first of them (the default) when
// it is unset or empty, and — with a warning naming the variable and the values it takes — when
// it is anything else.
inline absl::string_view EnvOption(const char* name,
                                   std::initializer_list<absl::string_view> values) {
  const char* v = std::getenv(name);
  const absl::string_view s = v != nullptr ? v : "";
  for (absl::string_view value : values) {
    if (s == value) return value;
  }
  if (!s.empty()) {
    Log(LogLevel::kWarning, absl::StrCat(name, "=", s, ": not ", absl::StrJoin(values, ", "),
                                         "; using ", *values.begin()));
  }
  return *values.begin();
}

}  // namespace linfer::cuda
