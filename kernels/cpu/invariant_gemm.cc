// The batch-invariant GEMM (see invariant_gemm.h). Every tile shape runs the same per-element
// sequence: the lane accumulators, the reduction tree and the tail are shared code, and fused
// multiply-adds (intrinsics or std::fma) leave the compiler no contraction choice.
#include "kernels/cpu/invariant_gemm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LINFER_INVARIANT_AVX2 1
#endif

namespace linfer::cpu {
namespace {

constexpr int kLanes = 8;
constexpr int kTileRows = 4;  // x rows per tile
constexpr int kTileCols = 3;  // w rows per tile (4×3 accumulators + 3 w vectors + 1 x = 16 ymm)

inline float ReduceLanes(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Outputs [R rows of x] × [C rows of w] over all of k.
template <int R, int C>
void Tile(const float* x, int64_t ldx, const float* w, int64_t k, float* y, int64_t ldy,
          bool accumulate) {
  float lanes[R][C][kLanes];
  int64_t kk = 0;
#ifdef LINFER_INVARIANT_AVX2
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (; kk + kLanes <= k; kk += kLanes) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * k + kk);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + kk);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(lanes[r][c], acc[r][c]);
#else
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) std::fill_n(lanes[r][c], kLanes, 0.0f);
  for (; kk + kLanes <= k; kk += kLanes) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        for (int l = 0; l < kLanes; ++l)
          lanes[r][c][l] = std::fma(x[r * ldx + kk + l], w[c * k + kk + l], lanes[r][c][l]);
  }
#endif
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = ReduceLanes(lanes[r][c]);
      for (int64_t t = kk; t < k; ++t) s = std::fma(x[r * ldx + t], w[c * k + t], s);
      float& out = y[r * ldy + c];
      out = accumulate ? out + s : s;
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);

template <int R>
constexpr TileFn kRow[kTileCols] = {&Tile<R, 1>, &Tile<R, 2>, &Tile<R, 3>};
constexpr const TileFn* kTiles[kTileRows] = {kRow<1>, kRow<2>, kRow<3>, kRow<4>};

}  // namespace

bool InvariantGemmIsVectorized() {
#ifdef LINFER_INVARIANT_AVX2
  return true;
#else
  return false;
#endif
}

void InvariantGemm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t m,
                   int64_t n, int64_t k, bool accumulate) {
  // Weight rows per block: ~256 KiB of w, reused from L2 by every row tile.
  const int64_t block =
      std::clamp<int64_t>((int64_t{256} << 10) / (4 * std::max<int64_t>(k, 1)) / kTileCols, 1, 64) *
      kTileCols;
  const int64_t blocks = (n + block - 1) / block;
  ParallelFor(blocks, m * n * k > (int64_t{1} << 18), [&](int64_t b) {
    const int64_t j0 = b * block, j1 = std::min(n, j0 + block);
    for (int64_t i = 0; i < m; i += kTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - i));
      for (int64_t j = j0; j < j1; j += kTileCols) {
        const int cols = static_cast<int>(std::min<int64_t>(kTileCols, j1 - j));
        kTiles[rows - 1][cols - 1](x + i * ldx, ldx, w + j * k, k, y + i * ldy + j, ldy,
                                   accumulate);
      }
    }
  });
}

}  // namespace linfer::cpu
