// The CUDA-core tiled prefill attention (1b of attention.cu, the default for segments of 16+ new
// tokens): a block takes up to 16 query units (row, head) of one segment and one kv head's group
// — R consecutive rows × Gb heads — and streams the keys j ∈ [lo(first row), last row's position]
// through shared memory 32 at a time (K transposed with an odd stride, V row-major), so a key is
// read from memory once per block instead of once per query and head. A warp owns 4 units; lane t
// scores key j0 + t for each (no shuffle per key; Q rows read as float4 broadcasts), then one
// online-softmax step per tile: m' = max(m, max_t s_t), a ← a·e^{m−m'} + Σ_t e^{s_t−m'} v_t,
// each V row read once for the warp's 4 units. Keys a unit may not see (after its position,
// before its window) score −∞. Keys come from the cache before the segment and from the step's
// own k/v rows after, as in attention.cu. f32 throughout.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/launch.cuh"

namespace linfer::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kTileKeys = 32;              // keys per shared-memory tile (one per lane)
constexpr int kKeyStride = kTileKeys + 1;  // transposed K rows padded: conflict-free both ways
constexpr int kUnitsPerWarp = 4;
constexpr int kTileUnits = kUnitsPerWarp * kWarpsPerBlock;  // query units per block

// Dynamic shared memory of the tiled kernel: K^T [D][33], V [32][D], Q [16][D] floats.
inline size_t TiledSharedBytes(int head_dim) {
  return sizeof(float) * static_cast<size_t>(head_dim) * (kKeyStride + kTileKeys + kTileUnits);
}

// Segment `si`'s row tile × heads [g0, g0 + gb) of kv head kvh's group, with
// by = kvh · ⌈G/gb⌉ + g0/gb; row tiles in reverse block order (the last rows see the most keys:
// their blocks start first). Unit u = (row r0 + u / gb, head kvh·G + g0 + u % gb). kPerLane:
// features per lane, ⌈head_dim / 32⌉ rounded up to 1, 2, 4 or 8.
template <int kPerLane, int kKv>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    TiledAttendKernel(AttnArgs p, int64_t si, int gb, int rows) {
  PdlEnter();
  extern __shared__ float smem[];
  const int d = p.head_dim;
  float* kt = smem;                 // [d][kKeyStride]: kt[x·33 + t] = K[j0 + t][x]
  float* vs = kt + d * kKeyStride;  // [kTileKeys][d]
  float* qs = vs + kTileKeys * d;   // [kTileUnits][d]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const Row4 s = LoadSegment(p.segs, si);
  const int group = p.q_heads / p.kv_heads, head_blocks = (group + gb - 1) / gb;
  const int kvh = static_cast<int>(blockIdx.y) / head_blocks;
  const int g0 = (static_cast<int>(blockIdx.y) % head_blocks) * gb;
  const int64_t r0 = int64_t{gridDim.x - 1 - blockIdx.x} * rows;
  const int64_t r_end = r0 + rows < s.num_tokens ? r0 + rows : s.num_tokens;
  auto unit_valid = [&](int u) { return r0 + u / gb < r_end && g0 + u % gb < group; };
  auto unit_head = [&](int u) { return kvh * group + g0 + u % gb; };

  for (int i = threadIdx.x; i < kTileUnits * d; i += blockDim.x) {
    const int u = i / d, x = i % d;
    qs[i] = unit_valid(u) ? p.q(s.row_begin + r0 + u / gb, int64_t{unit_head(u)} * d + x) : 0.0f;
  }
  const int64_t pos_first = s.position + r0, pos_last = s.position + r_end - 1;
  int64_t lo_first = p.window > 0 ? pos_first - p.window + 1 : 0;
  if (lo_first < 0) lo_first = 0;

  float m[kUnitsPerWarp], l[kUnitsPerWarp], acc[kUnitsPerWarp][kPerLane];
  int64_t pos[kUnitsPerWarp], lo[kUnitsPerWarp];
  bool valid[kUnitsPerWarp];
  bool any = false;  // the warp has a unit (warp-uniform)
#pragma unroll
  for (int k = 0; k < kUnitsPerWarp; ++k) {
    const int u = warp * kUnitsPerWarp + k;
    valid[k] = unit_valid(u);
    any = any || valid[k];
    pos[k] = s.position + r0 + u / gb;
    lo[k] = p.window > 0 ? pos[k] - p.window + 1 : 0;
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[k][e] = 0.0f;
  }

  for (int64_t j0 = lo_first; j0 <= pos_last; j0 += kTileKeys) {
    __syncthreads();  // the previous tile has been read (and, the first time, Q written)
    // Warp w loads key rows t = w, w + 4, …: one row address per row, lanes over its features.
    for (int t = warp; t < kTileKeys; t += kWarpsPerBlock) {
      const int64_t j = j0 + t;
      KvRow kj{}, vj{};
      if (j <= pos_last) KeyValueRows<kKv>(p, si, s, j, kvh, &kj, &vj);
      for (int x = lane; x < d; x += 32) {
        kt[x * kKeyStride + t] = kj ? kj.At<kKv>(x) : 0.0f;
        vs[t * d + x] = vj ? vj.At<kKv>(x) : 0.0f;
      }
    }
    __syncthreads();
    if (!any) continue;  // every thread still reaches the barriers above
    // Scores of key j0 + lane for the warp's units: q·k over d (Q rows read as float4 when d
    // allows: one broadcast load per unit and four features).
    const int64_t j = j0 + lane;
    float sc[kUnitsPerWarp] = {};
    const float* q0 = qs + warp * kUnitsPerWarp * d;
    if ((d & 3) == 0) {
      for (int x = 0; x < d; x += 4) {
        const float k0 = kt[x * kKeyStride + lane], k1 = kt[(x + 1) * kKeyStride + lane];
        const float k2 = kt[(x + 2) * kKeyStride + lane], k3 = kt[(x + 3) * kKeyStride + lane];
#pragma unroll
        for (int k = 0; k < kUnitsPerWarp; ++k) {
          const float4 qv = *reinterpret_cast<const float4*>(q0 + k * d + x);
          sc[k] += qv.x * k0 + qv.y * k1 + qv.z * k2 + qv.w * k3;
        }
      }
    } else {
      for (int x = 0; x < d; ++x) {
        const float kx = kt[x * kKeyStride + lane];
#pragma unroll
        for (int k = 0; k < kUnitsPerWarp; ++k) sc[k] += q0[k * d + x] * kx;
      }
    }
    // The online softmax step per unit; w[k] = e^{s − m'} of this lane's key (0 if not visible).
    float w[kUnitsPerWarp];
#pragma unroll
    for (int k = 0; k < kUnitsPerWarp; ++k) {
      w[k] = 0.0f;
      if (!valid[k]) continue;  // warp-uniform
      const bool sees = j <= pos[k] && j >= lo[k];
      const float score = sees ? p.scale * sc[k] : -INFINITY;
      const float m_new = fmaxf(m[k], WarpMax(score));
      if (m_new == -INFINITY) continue;  // nothing visible yet (warp-uniform)
      const float carry = expf(m[k] - m_new);
      w[k] = sees ? expf(score - m_new) : 0.0f;
      l[k] = l[k] * carry + WarpSum(w[k]);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[k][e] *= carry;
      m[k] = m_new;
    }
    // a += Σ_t w_t v_t: each V row is read once for the warp's four units.
    for (int t = 0; t < kTileKeys; ++t) {
      float vt[kPerLane];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int x = lane + 32 * e;
        vt[e] = x < d ? vs[t * d + x] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kUnitsPerWarp; ++k) {
        const float wt = __shfl_sync(0xffffffffu, w[k], t);
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) acc[k][e] += wt * vt[e];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kUnitsPerWarp; ++k) {
    if (!valid[k]) continue;
    const int u = warp * kUnitsPerWarp + k;
    float* o = &p.out(s.row_begin + r0 + u / gb, int64_t{unit_head(u)} * d);
    const float inv = 1.0f / l[k];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int x = lane + 32 * e;
      if (x < d) o[x] = acc[k][e] * inv;
    }
  }
}

// Whether every instance (f32, bf16 and fp8 caches) got the shared memory of its widest head
// (once per process).
template <int kPerLane>
bool ReadyLanes() {
  static const bool ready =
      OptInShared(TiledAttendKernel<kPerLane, kKvF32>, TiledSharedBytes(32 * kPerLane)) &&
      OptInShared(TiledAttendKernel<kPerLane, kKvBf16>, TiledSharedBytes(32 * kPerLane)) &&
      OptInShared(TiledAttendKernel<kPerLane, kKvFp8>, TiledSharedBytes(32 * kPerLane));
  return ready;
}
bool Ready(int lanes) {
  switch (lanes) {
    case 1:
      return ReadyLanes<1>();
    case 2:
      return ReadyLanes<2>();
    case 4:
      return ReadyLanes<4>();
    case 8:
      return ReadyLanes<8>();
    default:
      return false;
  }
}

}  // namespace

bool TiledAttendReady(int head_dim) {
  const int lanes = LanesFor(head_dim);
  return lanes <= 8 && Ready(lanes);
}

absl::Status LaunchTiledAttend(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n) {
  // Gb heads of a group × R rows per block (16 units).
  const int group = p.q_heads / p.kv_heads;
  const int gb = group < kTileUnits ? group : kTileUnits, rows = kTileUnits / gb;
  const dim3 grid(static_cast<unsigned>(CeilDiv(n, rows)),
                  static_cast<unsigned>(p.kv_heads * CeilDiv(group, gb)));
  const size_t smem = TiledSharedBytes(p.head_dim);
  constexpr int kThreads = 32 * kWarpsPerBlock;
  const bool launched = WithLanes<8>(LanesFor(p.head_dim), [&](auto lanes) {
    WithKvDType(p.kv_store, [&](auto kv) {
      LaunchKernel(TiledAttendKernel<decltype(lanes)::value, decltype(kv)::value>, grid, kThreads,
                   smem, stream, p, si, gb, rows);
    });
  });
  if (!launched) return absl::InternalError(absl::StrCat("tiled attention: head_dim ", p.head_dim));
  return CheckLaunch("TiledAttendKernel");
}

}  // namespace linfer::cuda
