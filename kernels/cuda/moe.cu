// Mixture-of-experts ops (kernels/moe.h) on the device, a first correct version:
//   RouteKernel   one block per token: k rounds of a block-wide argmax over the logits not yet
//                 chosen (larger logit, or equal and lower index; NaN ranks as −∞), then the
//                 weights w_j = e^{l_j − l_1} / Σ_i e^{l_i − l_1} in the CPU twin's order.
//   UpKernel      H[p, r] = W_gate_up[e_p, r, :] · x[t_p, :] for every (token, choice) pair
//                 p = t·k + j: one warp per output row (8 a block), grid (pairs, 2I / 8).
//   DownKernel    O[p, c] = W_down[e_p, c, :] · (silu(H[p, :I]) ⊙ H[p, I:]), the activation staged
//                 in shared memory once per block: grid (pairs, D / 8).
//   CombineKernel y[t, c] (+)= Σ_j w[t, j] O[t·k + j, c] (+ σ(s_t) · shared[t, c]).
// Each pair reads its expert's 3·I·D weights whole: a batch of B tokens reads min(B·k, E)
// experts' weights about B·k / min(B·k, E) times over — fine for a few tokens, ruinous for a
// prompt (an 8192-token chunk of Qwen3.5-35B-A3B would read ≈ 400 GB a layer). So from
// kGroupedPairsPerExpert pairs per expert on (LINFER_CUDA_MOE=auto; =gemv and =grouped force one
// path) the pairs are grouped by expert on the device and the products run as tiled GEMMs:
//   CountKernel     counts[e] = pairs routed to e (atomics; ids outside [0, E) skipped)
//   OffsetsKernel   one block: offsets[e] (pairs before e) and tile_offsets[e] (kTileM-row tiles
//                   before e) by prefix sums; cursor[e] = offsets[e]
//   ScatterKernel   sorted[cursor[e]++] = p (the order within an expert varies run to run; each
//                   pair's row is computed the same way wherever it lands)
//   GroupedUpKernel / GroupedDownKernel  grid (⌈pairs / kTileM⌉ + E tiles, N / kTileN): a block
//                   finds its expert by binary search over tile_offsets, stages kTileM gathered
//                   rows (x, or silu(g) ⊙ u of H) and kTileN weight rows (widened to f32) kTileK
//                   columns at a time in shared memory, each thread accumulating 4 × 4 outputs
//                   in f32 in a fixed order, and writes them to H / O at the pairs' own rows.
// Everything stays on the device (no host sync): graph capture and eager steps alike. SIMT f32
// arithmetic; tensor cores (bf16 operands) would change the results' rounding and are left for
// when a GPU run has timed this.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int kWarps = 8;  // output rows per block of UpKernel / DownKernel
constexpr int kCombineThreads = 256;
// The grouped GEMMs' tiles: kTileM pairs × kTileN outputs, kTileK columns staged at a time;
// 256 threads as 16 × 16, each 4 rows × 4 columns.
constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kGroupThreads = 256;
// auto: grouped when pairs ≥ this · E. At about one pair an expert a 64-row tile computes 64 rows
// to use one, where the GEMV reads the weights once: a review's estimate puts the break-even near
// 8–16 pairs an expert (the `Moe/` benchmark rows, each path alone, will say).
constexpr int64_t kGroupedPairsPerExpert = 8;

template <typename W>
__device__ inline float Widen(W w) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>) {
    return __bfloat162float(w);
  } else {
    return w;
  }
}

// An expert stack [E, R, C] as the kernels read it: value (row, c) of the flattened row e·R + r,
// widened to f32. Plain: f32 or bf16 values. Fp8: e4m3 bytes times their row-expanded scales
// (kernels/tensor.h TensorView::scales), the value the CPU reads.
template <typename W>
struct Plain {
  const W* w;
  __device__ float operator()(int64_t row, int64_t c, int64_t cols) const {
    return Widen(w[row * cols + c]);
  }
};
struct Fp8 {
  const unsigned char* q;
  const float* scales;
  int64_t scale_cols, block_cols;
  __device__ float operator()(int64_t row, int64_t c, int64_t cols) const {
    // 32-bit division (a row's width fits: MoeSupported bounds it).
    return E4m3(q[row * cols + c]) *
           scales[row * scale_cols + static_cast<int>(c) / static_cast<int>(block_cols)];
  }
};

__device__ inline float RankKey(float v) { return isnan(v) ? -INFINITY : v; }
// (v, e) ranks before (bv, be).
__device__ inline bool Before(float v, int e, float bv, int be) {
  return v > bv || (v == bv && e < be);
}

__global__ void RouteKernel(const float* logits, int64_t ld, int experts, int k, bool normalize,
                            int32_t* idx, float* weights) {
  PdlEnter();
  __shared__ int chosen[kMaxMoeTopK];
  __shared__ float chosen_key[kMaxMoeTopK];
  __shared__ float warp_key[kRouteThreads / 32];
  __shared__ int warp_idx[kRouteThreads / 32];
  const int64_t t = blockIdx.x;
  const float* l = logits + t * ld;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int be = 0x7fffffff;
    for (int e = threadIdx.x; e < experts; e += kRouteThreads) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= chosen[i] == e;
      const float v = RankKey(l[e]);
      if (!taken && Before(v, e, bv, be)) bv = v, be = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (Before(ov, oe, bv, be)) bv = ov, be = oe;
    }
    if (lane == 0) warp_key[warp] = bv, warp_idx[warp] = be;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kRouteThreads / 32; ++w) {
        if (Before(warp_key[w], warp_idx[w], bv, be)) bv = warp_key[w], be = warp_idx[w];
      }
      chosen[j] = be;
      chosen_key[j] = bv;
    }
    __syncthreads();
  }
  const float top = chosen_key[0];
  // e^{key − top}, or with ±∞ at the top 1 for the entries equal to it and 0 for the others.
  auto weight = [top](float v) { return isfinite(top) ? expf(v - top) : (v == top ? 1.0f : 0.0f); };
  float sum = 0.0f;
  if (!normalize) {  // the whole row's normaliser: per-thread partial sums, then a fixed tree
    __shared__ float warp_sum[kRouteThreads / 32];
    for (int e = threadIdx.x; e < experts; e += kRouteThreads) sum += weight(RankKey(l[e]));
    sum = WarpSum(sum);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < kRouteThreads / 32; ++w) sum += warp_sum[w];
  }
  if (threadIdx.x != 0) return;
  float w[kMaxMoeTopK];
  float top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    w[j] = weight(chosen_key[j]);
    top_sum += w[j];
  }
  if (normalize) sum = top_sum;
  for (int j = 0; j < k; ++j) {
    idx[t * k + j] = chosen[j];
    weights[t * k + j] = w[j] / sum;
  }
}

// Lane 0 of a warp writes Σ_i w(row, i) · v[i] to *out, or NaN for an expert id outside
// [0, experts) (its row is then not read).
template <typename W>
__device__ inline void WarpRowDot(const W& w, int64_t row, const float* v, int64_t n, int e,
                                  int experts, float* out) {
  const int lane = threadIdx.x & 31;
  if (e < 0 || e >= experts) {
    if (lane == 0) *out = NAN;
    return;
  }
  float acc = 0.0f;
  for (int64_t i = lane; i < n; i += 32) acc += w(row, i, n) * v[i];
  acc = WarpSum(acc);
  if (lane == 0) *out = acc;
}

template <typename W>
__global__ void UpKernel(const float* x, int64_t x_ld, const int32_t* idx, int k, int experts,
                         W gate_up, int64_t d, int64_t rows, float* h) {
  PdlEnter();
  const int64_t p = blockIdx.x;
  const int64_t r = int64_t{blockIdx.y} * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int e = idx[p];
  WarpRowDot(gate_up, int64_t{e} * rows + r, x + p / k * x_ld, d, e, experts, h + p * rows + r);
}

template <typename W>
__global__ void DownKernel(const float* h, const int32_t* idx, int experts, W down, int64_t d,
                           int64_t inter, float* o) {
  PdlEnter();
  extern __shared__ float act[];  // inter floats: ≤ 48 KB (MoeSupported bounds the width)
  const int64_t p = blockIdx.x;
  const float* hp = h + p * 2 * inter;
  for (int64_t i = threadIdx.x; i < inter; i += kWarps * 32) {
    act[i] = DeviceSwiGlu(hp[i], hp[inter + i]);
  }
  __syncthreads();
  const int64_t r = int64_t{blockIdx.y} * kWarps + (threadIdx.x >> 5);
  if (r >= d) return;
  const int e = idx[p];
  WarpRowDot(down, int64_t{e} * d + r, act, inter, e, experts, o + p * d + r);
}

// ---- the grouped path ------------------------------------------------------------------------

__global__ void CountKernel(const int32_t* idx, int64_t pairs, int experts, int32_t* counts) {
  PdlEnter();
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int e = idx[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
}

// One block of 1024 threads: exclusive prefix sums of counts and of their tiles, each thread a
// contiguous run of experts, then the threads' totals scanned in shared memory.
__global__ void OffsetsKernel(const int32_t* counts, int experts, int32_t* offsets,
                              int32_t* tile_offsets, int32_t* cursor) {
  PdlEnter();
  __shared__ int32_t run_pairs[1024], run_tiles[1024];
  const int per = (experts + 1023) / 1024, begin = threadIdx.x * per;
  const int end = begin + per < experts ? begin + per : experts;
  int32_t pairs = 0, tiles = 0;
  for (int e = begin; e < end; ++e) pairs += counts[e], tiles += (counts[e] + kTileM - 1) / kTileM;
  run_pairs[threadIdx.x] = pairs;
  run_tiles[threadIdx.x] = tiles;
  __syncthreads();
  if (threadIdx.x == 0) {  // 1024 additions: negligible beside the GEMMs
    int32_t p = 0, q = 0;
    for (int i = 0; i < 1024; ++i) {
      const int32_t np = p + run_pairs[i], nq = q + run_tiles[i];
      run_pairs[i] = p, run_tiles[i] = q;
      p = np, q = nq;
    }
    offsets[experts] = p;
    tile_offsets[experts] = q;
  }
  __syncthreads();
  pairs = run_pairs[threadIdx.x];
  tiles = run_tiles[threadIdx.x];
  for (int e = begin; e < end; ++e) {
    offsets[e] = cursor[e] = pairs;
    tile_offsets[e] = tiles;
    pairs += counts[e];
    tiles += (counts[e] + kTileM - 1) / kTileM;
  }
}

__global__ void ScatterKernel(const int32_t* idx, int64_t pairs, int experts, int32_t* cursor,
                              int32_t* sorted) {
  PdlEnter();
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int e = idx[p];
    if (e >= 0 && e < experts) sorted[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(p);
  }
}

// A tile's expert: the last e with tile_offsets[e] ≤ tile (experts with no pairs have no tiles);
// -1 past the last tile.
__device__ inline int TileExpert(const int32_t* tile_offsets, int experts, int tile) {
  if (tile >= tile_offsets[experts]) return -1;
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_offsets[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// out[p, n] = Σ_c A(p, c) · W[e, n, c] over the pairs p of one expert tile and kTileN outputs n,
// A(p, c) = x[p / k, c] (kUp) or silu(H[p, c]) · H[p, inter + c] (down; H's rows 2·inter wide).
// `kdim` = the product's inner size (D for up, I for down), `n_out` its outputs (2I or D).
template <typename W, bool kUp>
__global__ void __launch_bounds__(kGroupThreads)
    GroupedKernel(const float* a, int64_t a_ld, int k, const int32_t* sorted,
                  const int32_t* offsets, const int32_t* tile_offsets, int experts, W w,
                  int64_t kdim, int64_t n_out, float* out) {
  PdlEnter();
  __shared__ float as[kTileK][kTileM + 1];
  __shared__ float ws[kTileK][kTileN + 1];
  __shared__ int32_t rows[kTileM];
  const int tile = static_cast<int>(blockIdx.x);
  const int e = TileExpert(tile_offsets, experts, tile);
  if (e < 0) return;
  const int32_t first = offsets[e] + (tile - tile_offsets[e]) * kTileM;
  const int m = min(kTileM, offsets[e + 1] - first);
  const int64_t n0 = int64_t{blockIdx.y} * kTileN;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  if (tid < kTileM) rows[tid] = tid < m ? sorted[first + tid] : -1;
  __syncthreads();
  float acc[4][4] = {};
  for (int64_t c0 = 0; c0 < kdim; c0 += kTileK) {
    // Stage A: kTileM rows × kTileK columns, 4 values a thread (row r, column kk).
    for (int i = tid; i < kTileM * kTileK; i += kGroupThreads) {
      const int r = i / kTileK, kk = i % kTileK;
      const int64_t c = c0 + kk;
      float v = 0.0f;
      if (rows[r] >= 0 && c < kdim) {
        if constexpr (kUp) {
          v = a[rows[r] / k * a_ld + c];
        } else {
          const float* hp = a + int64_t{rows[r]} * a_ld;
          v = DeviceSwiGlu(hp[c], hp[kdim + c]);
        }
      }
      as[kk][r] = v;
    }
    // Stage W: kTileN weight rows × kTileK columns.
    for (int i = tid; i < kTileN * kTileK; i += kGroupThreads) {
      const int nn = i / kTileK, kk = i % kTileK;
      const int64_t n = n0 + nn, c = c0 + kk;
      ws[kk][nn] = n < n_out && c < kdim ? w(int64_t{e} * n_out + n, c, kdim) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i], wv[i] = ws[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (rows[r] < 0) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx * 4 + j;
      if (n < n_out) out[int64_t{rows[r]} * n_out + n] = acc[i][j];
    }
  }
}

__global__ void CombineKernel(const float* o, const float* weights, const int32_t* idx, int experts,
                              int k, int64_t d, const float* shared, int64_t shared_ld,
                              const float* gate, int64_t gate_ld, Mat y, bool accumulate) {
  PdlEnter();
  const int64_t t = blockIdx.x;
  const int64_t c = int64_t{blockIdx.y} * kCombineThreads + threadIdx.x;
  if (c >= d) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int e = idx[t * k + j];  // an id outside [0, E): a NaN row, on either path
    acc += e >= 0 && e < experts ? weights[t * k + j] * o[(t * k + j) * d + c] : NAN;
  }
  if (shared != nullptr) acc += DeviceSigmoid(gate[t * gate_ld]) * shared[t * shared_ld + c];
  y(t, c) = accumulate ? y(t, c) + acc : acc;
}

// LINFER_CUDA_MOE: "auto" (grouped from kGroupedPairsPerExpert pairs per expert), "gemv" or
// "grouped".
bool Grouped(int64_t pairs, int64_t experts) {
  static const absl::string_view mode = EnvOption("LINFER_CUDA_MOE", {"auto", "gemv", "grouped"});
  if (mode != "auto") return mode == "grouped";
  return pairs >= kGroupedPairsPerExpert * experts;
}

// H and O of every pair by the per-pair GEMV kernels.
template <typename W>
absl::Status RunPerPair(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& gate_up, const TensorView& down, W gu, W dn,
                        const TensorView& h, const TensorView& o) {
  const int64_t d = x.dim(1), k = idx.dim(1), pairs = x.dim(0) * k;
  const int64_t experts = gate_up.dim(0), inter = down.dim(2);
  const cudaStream_t stream = Stream(ctx);
  const int32_t* ids = idx.data<const int32_t>();
  LaunchKernel(
      UpKernel<W>,
      dim3(static_cast<unsigned>(pairs), static_cast<unsigned>(CeilDiv(2 * inter, kWarps))),
      kWarps * 32, 0, stream, x.data<const float>(), x.row_stride(), ids, static_cast<int>(k),
      static_cast<int>(experts), gu, d, 2 * inter, h.data<float>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts UpKernel"));
  LaunchKernel(DownKernel<W>,
               dim3(static_cast<unsigned>(pairs), static_cast<unsigned>(CeilDiv(d, kWarps))),
               kWarps * 32, sizeof(float) * inter, stream, h.data<const float>(), ids,
               static_cast<int>(experts), dn, d, inter, o.data<float>());
  return CheckLaunch("MoeExperts DownKernel");
}

// H and O of every pair by the grouped GEMMs (the pairs sorted by expert on the device).
template <typename W>
absl::Status RunGrouped(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& gate_up, const TensorView& down, W gu, W dn,
                        const TensorView& h, const TensorView& o) {
  const int64_t d = x.dim(1), k = idx.dim(1), pairs = x.dim(0) * k;
  const int64_t experts = gate_up.dim(0), inter = down.dim(2);
  const cudaStream_t stream = Stream(ctx);
  const int32_t* ids = idx.data<const int32_t>();
  ASSIGN_OR_RETURN(TensorView counts, Scratch(ctx, DType::kI32, {experts + 1}));
  ASSIGN_OR_RETURN(TensorView offsets, Scratch(ctx, DType::kI32, {experts + 1}));
  ASSIGN_OR_RETURN(TensorView tiles, Scratch(ctx, DType::kI32, {experts + 1}));
  ASSIGN_OR_RETURN(TensorView cursor, Scratch(ctx, DType::kI32, {experts}));
  ASSIGN_OR_RETURN(TensorView sorted, Scratch(ctx, DType::kI32, {pairs}));
  RETURN_IF_ERROR(cuda::ZeroTensor(ctx, counts));
  const unsigned scan_blocks = GridFor(pairs, 256, 4096);
  LaunchKernel(CountKernel, scan_blocks, 256, 0, stream, ids, pairs, static_cast<int>(experts),
               counts.data<int32_t>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts CountKernel"));
  LaunchKernel(OffsetsKernel, 1, 1024, 0, stream, counts.data<const int32_t>(),
               static_cast<int>(experts), offsets.data<int32_t>(), tiles.data<int32_t>(),
               cursor.data<int32_t>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts OffsetsKernel"));
  LaunchKernel(ScatterKernel, scan_blocks, 256, 0, stream, ids, pairs, static_cast<int>(experts),
               cursor.data<int32_t>(), sorted.data<int32_t>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts ScatterKernel"));
  // Tiles: at most ⌈pairs / kTileM⌉ + E (each expert's last tile may be partial); the blocks past
  // the last tile return at once.
  const unsigned max_tiles = static_cast<unsigned>(CeilDiv(pairs, kTileM) + experts);
  LaunchKernel(
      GroupedKernel<W, true>, dim3(max_tiles, static_cast<unsigned>(CeilDiv(2 * inter, kTileN))),
      kGroupThreads, 0, stream, x.data<const float>(), x.row_stride(), static_cast<int>(k),
      sorted.data<const int32_t>(), offsets.data<const int32_t>(), tiles.data<const int32_t>(),
      static_cast<int>(experts), gu, d, 2 * inter, h.data<float>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts GroupedKernel (up)"));
  LaunchKernel(GroupedKernel<W, false>, dim3(max_tiles, static_cast<unsigned>(CeilDiv(d, kTileN))),
               kGroupThreads, 0, stream, h.data<const float>(), 2 * inter, static_cast<int>(k),
               sorted.data<const int32_t>(), offsets.data<const int32_t>(),
               tiles.data<const int32_t>(), static_cast<int>(experts), dn, inter, d,
               o.data<float>());
  return CheckLaunch("MoeExperts GroupedKernel (down)");
}

template <typename W>
absl::Status RunExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, W gu, W dn, const MoeShared* shared,
                        const TensorView& y, bool accumulate) {
  const int64_t t = x.dim(0), d = x.dim(1), k = idx.dim(1), pairs = t * k;
  const int64_t experts = gate_up.dim(0), inter = down.dim(2);
  ScratchScope scope(ctx);
  ASSIGN_OR_RETURN(TensorView h, Scratch(ctx, DType::kF32, {pairs, 2 * inter}));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, DType::kF32, {pairs, d}));
  if (Grouped(pairs, experts)) {
    RETURN_IF_ERROR(RunGrouped(ctx, x, idx, gate_up, down, gu, dn, h, o));
  } else {
    RETURN_IF_ERROR(RunPerPair(ctx, x, idx, gate_up, down, gu, dn, h, o));
  }
  LaunchKernel(CombineKernel,
               dim3(static_cast<unsigned>(t), static_cast<unsigned>(CeilDiv(d, kCombineThreads))),
               kCombineThreads, 0, Stream(ctx), o.data<const float>(), weights.data<const float>(),
               idx.data<const int32_t>(), static_cast<int>(experts), static_cast<int>(k), d,
               shared != nullptr ? shared->out.data<const float>() : nullptr,
               shared != nullptr ? shared->out.row_stride() : 0,
               shared != nullptr ? shared->gate.data<const float>() : nullptr,
               shared != nullptr ? shared->gate.row_stride() : 0, AsMat(y), accumulate);
  return CheckLaunch("MoeExperts CombineKernel");
}

}  // namespace

absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize) {
  LaunchKernel(RouteKernel, dim3(static_cast<unsigned>(logits.dim(0))), kRouteThreads, 0,
               Stream(ctx), logits.data<const float>(), logits.row_stride(),
               static_cast<int>(logits.dim(1)), static_cast<int>(idx.dim(1)), normalize,
               idx.data<int32_t>(), weights.data<float>());
  return CheckLaunch("MoeRoute RouteKernel");
}

absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate) {
  const auto run = [&](auto gu, auto dn) {
    return RunExperts(ctx, x, idx, weights, gate_up, down, gu, dn, shared, y, accumulate);
  };
  const auto fp8 = [](const TensorView& w) {
    return Fp8{static_cast<const unsigned char*>(w.raw()), w.scales(), w.scale_cols(),
               std::min(w.scale_block_cols(), std::max<int64_t>(w.dim(-1), 1))};
  };
  switch (gate_up.dtype()) {
    case DType::kBF16:
      return run(Plain<__nv_bfloat16>{gate_up.data<const __nv_bfloat16>()},
                 Plain<__nv_bfloat16>{down.data<const __nv_bfloat16>()});
    case DType::kF8E4M3:
      return run(fp8(gate_up), fp8(down));
    default:
      return run(Plain<float>{gate_up.data<const float>()}, Plain<float>{down.data<const float>()});
  }
}

}  // namespace linfer::cuda
