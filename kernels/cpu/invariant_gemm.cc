// The batch-invariant GEMM (see invariant_gemm.h). Every tile shape runs the same per-element
// sequence: the lane accumulators, the reduction tree and the tail are shared code, and fused
// multiply-adds (intrinsics or std::fma) leave the compiler no contraction choice. 16-bit weights
// are widened exactly (bf16: the bits shifted into the top half; f16: F16C / F16ToF32), so the
// per-element sequence sees the same f32 values whichever way a weight reaches it.
#include "kernels/cpu/invariant_gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/tensor.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LINFER_INVARIANT_AVX2 1
#endif

namespace linfer::cpu {
namespace {

constexpr int kLanes = 8;
constexpr int kTileRows = 4;  // x rows per tile
// w rows per tile by x rows per tile: 1×12, 2×6, 3×3 and 4×3 accumulators, so at least 9
// independent fused multiply-add chains hide the instruction's latency (a 1×3 tile left a batch-1
// decode waiting on it) within 16 ymm registers.
constexpr int kTileColsFor[kTileRows + 1] = {0, 12, 6, 3, 3};
constexpr int kMaxTileCols = 12;
// Above this many rows a 16-bit weight block is widened once into an f32 buffer.
constexpr int64_t kWidenRows = 2 * kTileRows;
// fp8 weights are dequantized as the tiles load them up to this many rows only: their conversion
// costs more than a 16-bit one (measured on a 2-core VM, Qwen3.5 shape, 8 rows: 96 tok/s loading,
// 117–127 through the buffer).
constexpr int64_t kFp8StreamRows = 2;

template <WeightFormat F>
using Elem = std::conditional_t<F == WeightFormat::kF32, float,
                                std::conditional_t<F == WeightFormat::kF8E4M3, uint8_t, uint16_t>>;

// An fp8 tile's scales: row c's at s + c·sc, one per bc columns (unused for other formats).
struct RowScales {
  const float* s = nullptr;
  int64_t sc = 0, bc = 1;
  RowScales Row(int64_t c) const { return {s + c * sc, sc, bc}; }
};

// Element i of weight row w (its scales `rs` for fp8) as f32.
template <WeightFormat F>
inline float Widen(const Elem<F>* w, int64_t i, const RowScales& rs) {
  if constexpr (F == WeightFormat::kF32) {
    return w[i];
  } else if constexpr (F == WeightFormat::kBF16) {
    return Bf16ToF32(w[i]);
  } else if constexpr (F == WeightFormat::kF16) {
    return F16ToF32(w[i]);
  } else {
    return E4m3Values()[w[i]] * rs.s[i / rs.bc];
  }
}

#ifdef LINFER_INVARIANT_AVX2
// e4m3 S.EEEE.MMM → the f16 bits S.0EEEE.MMM0000000: 2⁻⁸ times the e4m3 value (subnormals
// included, f16's exponent bias being 8 more). Times 2⁸ (exact) then the scale: rounded once, as
// table[q]·s. (A NaN byte S.1111.111 would read as ±480·s: scaled tensors hold none,
// kernels/tensor.h Tensor::Scaled.)
inline __m256 E4m3Lanes(const uint8_t* q, __m256 scale) {
  const __m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  const __m128i bits = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8),
                                    _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7F)), 7));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(bits), _mm256_set1_ps(256.0f)), scale);
}

// Elements [kk, kk + 8) of weight row w; fp8 rows with their scale `*scale` (the 8 columns share
// one block: the callers make sure of it).
template <WeightFormat F>
inline __m256 Widen8(const Elem<F>* w, int64_t kk, const float* scale) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm256_loadu_ps(w + kk);
  } else if constexpr (F == WeightFormat::kF8E4M3) {
    return E4m3Lanes(w + kk, _mm256_broadcast_ss(scale));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kk));
    if constexpr (F == WeightFormat::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}
#endif

// dst[0, count) = the f32 widening of src[0, count) (16-bit formats).
template <WeightFormat F>
void WidenInto(const Elem<F>* src, int64_t count, float* dst) {
  int64_t i = 0;
#ifdef LINFER_INVARIANT_AVX2
  for (; i + kLanes <= count; i += kLanes) _mm256_storeu_ps(dst + i, Widen8<F>(src, i, nullptr));
#endif
  for (; i < count; ++i) dst[i] = Widen<F>(src, i, {});
}

inline float ReduceLanes(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Outputs [R rows of x] × [C rows of w] over all of k.
template <WeightFormat F, int R, int C>
void Tile(const float* x, int64_t ldx, const Elem<F>* w, int64_t k, RowScales rs, float* y,
          int64_t ldy, bool accumulate) {
  float lanes[R][C][kLanes];
  int64_t kk = 0;
#ifdef LINFER_INVARIANT_AVX2
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  // fp8: the block of columns kk falls in (bc is a multiple of 8 or covers the row, so a vector
  // never straddles two), row c's scale for it at rs.s[c·sc + blk].
  int64_t blk = 0, blk_end = rs.bc;
  for (; kk + kLanes <= k; kk += kLanes) {
    if constexpr (F == WeightFormat::kF8E4M3) {
      if (kk >= blk_end) {
        ++blk;
        blk_end += rs.bc;
      }
    }
    if constexpr (R <= 2) {  // x in registers, one weight vector at a time
      // Streaming the weights (decode): prefetch the next tile's rows (contiguous after these) at
      // the rate this tile consumes its own; rows are short (k elements), too short for the
      // hardware prefetcher to ramp up on each.
      // (16-bit weights only: with f32 ones it measured slower, 31 vs 35 tok/s at batch 1.)
      if constexpr (F != WeightFormat::kF32) {
        constexpr int kStep = C * kLanes * static_cast<int>(sizeof(Elem<F>));
        const char* next = reinterpret_cast<const char*>(w + C * k) + kk / kLanes * kStep;
        for (int p = 0; p < kStep; p += 64) _mm_prefetch(next + p, _MM_HINT_T0);
      }
      __m256 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + kk);
      for (int c = 0; c < C; ++c) {
        const __m256 wv = Widen8<F>(w + c * k, kk, rs.s + c * rs.sc + blk);
        for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
      }
    } else {  // the weight vectors in registers, one x row at a time
      __m256 wv[C];
      for (int c = 0; c < C; ++c) wv[c] = Widen8<F>(w + c * k, kk, rs.s + c * rs.sc + blk);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + r * ldx + kk);
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
      }
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
          lanes[r][c][l] =
              std::fma(x[r * ldx + kk + l], Widen<F>(w + c * k, kk + l, rs.Row(c)), lanes[r][c][l]);
  }
#endif
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = ReduceLanes(lanes[r][c]);
      for (int64_t t = kk; t < k; ++t) {
        s = std::fma(x[r * ldx + t], Widen<F>(w + c * k, t, rs.Row(c)), s);
      }
      float& out = y[r * ldy + c];
      out = accumulate ? out + s : s;
    }
  }
}

template <WeightFormat F>
using TileFn = void (*)(const float*, int64_t, const Elem<F>*, int64_t, RowScales, float*, int64_t,
                        bool);

// kTiles<F>[R - 1][C - 1] = Tile<F, R, C> for C ≤ kTileColsFor[R] (else null).
template <WeightFormat F, int R, int... C>
constexpr std::array<TileFn<F>, kMaxTileCols> MakeRow(std::integer_sequence<int, C...>) {
  return {(C + 1 <= kTileColsFor[R] ? &Tile<F, R, std::min(C + 1, kTileColsFor[R])> : nullptr)...};
}
template <WeightFormat F, int R>
constexpr std::array<TileFn<F>, kMaxTileCols> kRow =
    MakeRow<F, R>(std::make_integer_sequence<int, kMaxTileCols>());
template <WeightFormat F>
constexpr const std::array<TileFn<F>, kMaxTileCols>* kTiles[kTileRows] = {&kRow<F, 1>, &kRow<F, 2>,
                                                                          &kRow<F, 3>, &kRow<F, 4>};

// Every row tile of x against weight rows [j0, j1) of w (w and rs point at row j0).
template <WeightFormat F>
void Block(const float* x, int64_t ldx, const Elem<F>* w, RowScales rs, float* y, int64_t ldy,
           int64_t m, int64_t j0, int64_t j1, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < m; i += kTileRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - i));
    const int width = kTileColsFor[rows];
    for (int64_t j = j0; j < j1; j += width) {
      const int cols = static_cast<int>(std::min<int64_t>(width, j1 - j));
      (*kTiles<F>[rows - 1])[cols - 1](x + i * ldx, ldx, w + (j - j0) * k, k, rs.Row(j - j0),
                                       y + i * ldy + j, ldy, accumulate);
    }
  }
}

// Weight rows per block: ~256 KiB of f32 weights, reused from L2 by every row tile.
int64_t BlockRows(int64_t k) {
  return std::clamp<int64_t>((int64_t{256} << 10) / (4 * std::max<int64_t>(k, 1)) / kMaxTileCols, 1,
                             16) *
         kMaxTileCols;
}

// Blocks of `block` weight rows on the OpenMP threads: body(j0, j1, wide), wide(count) a thread's
// f32 buffer of at least `count` floats for a widened block (allocated on first use). Threads only
// past 2^20 multiply-adds (4 MiB of f32 weights at one row): below that, waking the passive OpenMP
// team costs more than it saves (measured at 2^18 on a busy 2-core VM: the bundled tiny model's
// stacked 264k-MAC projection made batch-1 decode 9 % slower threaded).
template <typename Body>
void ForBlocks(int64_t m, int64_t n, int64_t k, Body&& body) {
  const int64_t block = BlockRows(k);
  ParallelFor<Schedule::kDynamic>((n + block - 1) / block, m * n * k > (int64_t{1} << 20),
                                  [&](int64_t b) {
                                    const int64_t j0 = b * block, j1 = std::min(n, j0 + block);
                                    auto wide = [](int64_t count) {
                                      thread_local std::vector<float> buffer;
                                      if (static_cast<int64_t>(buffer.size()) < count) {
                                        buffer.resize(count);
                                      }
                                      return buffer.data();
                                    };
                                    body(j0, j1, wide);
                                  });
}

template <WeightFormat F>
void Run(const float* x, int64_t ldx, const Elem<F>* w, float* y, int64_t ldy, int64_t m, int64_t n,
         int64_t k, bool accumulate) {
  const bool widen = F != WeightFormat::kF32 && m > kWidenRows;
  ForBlocks(m, n, k, [&](int64_t j0, int64_t j1, auto& wide) {
    const Elem<F>* wb = w + j0 * k;
    if (!widen) {
      Block<F>(x, ldx, wb, {}, y, ldy, m, j0, j1, k, accumulate);
      return;
    }
    float* buffer = wide((j1 - j0) * k);
    WidenInto<F>(wb, (j1 - j0) * k, buffer);
    Block<WeightFormat::kF32>(x, ldx, buffer, {}, y, ldy, m, j0, j1, k, accumulate);
  });
}

// fp8 weights: dequantized as the tiles load them (one or two rows — a decode — and blocks of
// columns that never split an 8-lane vector), else a weight block at a time into the thread's
// buffer, then the f32 tiles. Either way each value is table[q]·s rounded once, so both give the
// same bits.
void RunFp8(const float* x, int64_t ldx, const uint8_t* w, WeightScales scales, float* y,
            int64_t ldy, int64_t m, int64_t n, int64_t k, bool accumulate) {
  const int64_t bc = scales.block_cols, sc = (k + bc - 1) / bc;
  const bool widen = m > kFp8StreamRows || (bc % kLanes != 0 && bc < k);
  ForBlocks(m, n, k, [&](int64_t j0, int64_t j1, auto& wide) {
    const RowScales rs{scales.rows + j0 * sc, sc, bc};
    if (!widen) {
      Block<WeightFormat::kF8E4M3>(x, ldx, w + j0 * k, rs, y, ldy, m, j0, j1, k, accumulate);
      return;
    }
    float* buffer = wide((j1 - j0) * k);
    DequantizeFp8Rows(w + j0 * k, j1 - j0, k, {rs.s, bc}, buffer);
    Block<WeightFormat::kF32>(x, ldx, buffer, {}, y, ldy, m, j0, j1, k, accumulate);
  });
}

}  // namespace

bool InvariantGemmIsVectorized() {
#ifdef LINFER_INVARIANT_AVX2
  return true;
#else
  return false;
#endif
}

void DequantizeFp8Rows(const uint8_t* w, int64_t rows, int64_t k, WeightScales scales, float* dst) {
  const std::array<float, 256>& table = E4m3Values();
  const int64_t bc = scales.block_cols, scale_cols = (k + bc - 1) / bc;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* q = w + r * k;
    float* out = dst + r * k;
    for (int64_t b = 0; b < scale_cols; ++b) {
      const float s = scales.rows[r * scale_cols + b];
      const int64_t c1 = std::min(k, (b + 1) * bc);
      int64_t c = b * bc;
#ifdef LINFER_INVARIANT_AVX2
      const __m256 sv = _mm256_set1_ps(s);
      for (; c + kLanes <= c1; c += kLanes) _mm256_storeu_ps(out + c, E4m3Lanes(q + c, sv));
#endif
      for (; c < c1; ++c) out[c] = table[q[c]] * s;
    }
  }
}

void InvariantGemm(const float* x, int64_t ldx, const void* w, WeightFormat format, float* y,
                   int64_t ldy, int64_t m, int64_t n, int64_t k, bool accumulate,
                   WeightScales scales) {
  switch (format) {
    case WeightFormat::kF32:
      return Run<WeightFormat::kF32>(x, ldx, static_cast<const float*>(w), y, ldy, m, n, k,
                                     accumulate);
    case WeightFormat::kBF16:
      return Run<WeightFormat::kBF16>(x, ldx, static_cast<const uint16_t*>(w), y, ldy, m, n, k,
                                      accumulate);
    case WeightFormat::kF16:
      return Run<WeightFormat::kF16>(x, ldx, static_cast<const uint16_t*>(w), y, ldy, m, n, k,
                                     accumulate);
    case WeightFormat::kF8E4M3:
      if (scales.rows == nullptr || scales.block_cols < 1) {  // the ops check it (gemm.h)
        std::fprintf(stderr, "InvariantGemm: fp8 weights without their scales\n");
        std::abort();
      }
      return RunFp8(x, ldx, static_cast<const uint8_t*>(w), scales, y, ldy, m, n, k, accumulate);
  }
}

}  // namespace linfer::cpu
