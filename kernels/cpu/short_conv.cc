// Short causal depthwise conv (CPU): per channel, a sliding window over [state ++ x].
#include "kernels/short_conv.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace linfer {

absl::Status ShortConv(const TensorView& x, const TensorView& w, const TensorView& state,
                       Activation act, const TensorView& y) {
  if (x.rank() != 2 || x.shape() != y.shape() || x.dtype() != DType::kF32 ||
      y.dtype() != DType::kF32 || w.dtype() != DType::kF32 || state.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShortConv: bad x ", x.DebugString(), " / y ", y.DebugString()));
  }
  const int64_t t_len = x.dim(0), c_len = x.dim(1);
  const int64_t width = w.dim(-1);
  if (w.numel() != c_len * width || state.numel() != c_len * width || width < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShortConv: weight ", w.DebugString(),
                                                   " / state ", state.DebugString(),
                                                   " do not match ", c_len, " channels"));
  }
  const float* xs = x.data<const float>();
  const float* ws = w.data<const float>();
  float* st = state.data<float>();
  float* ys = y.data<float>();
#pragma omp parallel if (c_len * t_len > 4096)
  {
    std::vector<float> window(width + t_len);
#pragma omp for
    for (int64_t c = 0; c < c_len; ++c) {
      // window = [state[c, 0..W) , x[0..T, c)]
      float* s = st + c * width;
      for (int64_t i = 0; i < width; ++i) window[i] = s[i];
      for (int64_t t = 0; t < t_len; ++t) window[width + t] = xs[t * c_len + c];
      const float* wc = ws + c * width;
      for (int64_t t = 0; t < t_len; ++t) {
        const float* in = window.data() + t + 1;  // inputs t−W+1 .. t
        float acc = 0.0f;
        for (int64_t i = 0; i < width; ++i) acc += wc[i] * in[i];
        ys[t * c_len + c] = Activate(act, acc);
      }
      for (int64_t i = 0; i < width; ++i) s[i] = window[t_len + i];
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer
