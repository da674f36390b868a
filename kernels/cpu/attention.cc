// Attention (CPU): per segment, token by token for a ring (a later token may overwrite a key an
// earlier one still sees), or all new keys first for paged caches; then, per (token, head), a
// max-subtracted softmax over the visible keys in f32: one pass for the max, one for the sums.
// Every key and value is read back from the cache, so with bf16 or fp8 storage all of them are
// rounded.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/invariant_gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer::cpu {
namespace {

// Addresses position `pos` of segment `s` in the cache: the element index of its K row for kv
// head 0 (V at ValueOffset()); storage f32, or bf16 or fp8 e4m3 (rounded on write, saturating for
// fp8; widened on read).
struct Cache {
  const KvCacheRef& kv;
  const BlockTableView& bt;
  const AttentionParams& p;
  DType dtype() const { return kv.storage.dtype(); }
  int64_t Row(int64_t seg_index, const Segment& s, int64_t pos) const {
    const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
    if (kv.kind == KvCacheRef::Kind::kRing) {
      return ((s.slot * 2) * p.window + pos % p.window) * hd;
    }
    const int32_t block = bt.host[seg_index * bt.max_blocks + pos / bt.block_tokens];
    return ((int64_t{block} * bt.block_tokens + pos % bt.block_tokens) * 2) * hd;
  }
  // V lives after K: for a ring the second of the [2, window] planes, for paged the next row.
  int64_t ValueOffset() const {
    const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
    return kv.kind == KvCacheRef::Kind::kRing ? int64_t{p.window} * hd : hd;
  }
  // n stored values from element `at` as f32: in place, or widened into `buf`.
  const float* Read(int64_t at, int64_t n, std::vector<float>& buf) const {
    if (dtype() == DType::kF32) return kv.storage.data<const float>() + at;
    buf.resize(static_cast<size_t>(n));
    if (dtype() == DType::kF8E4M3) {  // the fp8 weights' vectorized widening, scale 1
      static const float kOne = 1.0f;
      const uint8_t* src = kv.storage.data<const uint8_t>() + at;
      DequantizeFp8Rows(src, 1, n, {&kOne, n}, buf.data());
      // It reads a NaN byte (a NaN key or value written) as ±480: NaN again, as CUDA reads it.
      constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
      float* out = buf.data();
      for (int64_t i = 0; i < n; ++i) out[i] = (src[i] & 0x7F) == 0x7F ? kNan : out[i];
      return buf.data();
    }
    const uint16_t* src = kv.storage.data<const uint16_t>() + at;
    for (int64_t i = 0; i < n; ++i) buf[i] = std::bit_cast<float>(uint32_t{src[i]} << 16);
    return buf.data();
  }
  void Write(int64_t at, const float* src, int64_t n) const {
    if (dtype() == DType::kF32) {
      std::copy_n(src, n, kv.storage.data<float>() + at);
    } else if (dtype() == DType::kF8E4M3) {
      uint8_t* dst = kv.storage.data<uint8_t>() + at;
      for (int64_t i = 0; i < n; ++i) dst[i] = F32ToE4m3(src[i]);
    } else {
      uint16_t* dst = kv.storage.data<uint16_t>() + at;
      for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(src[i]);
    }
  }
};

void WriteToken(const Cache& c, int64_t si, const Segment& s, int64_t row, const TensorView& k,
                const TensorView& v) {
  const int64_t hd = int64_t{c.p.kv_heads} * c.p.head_dim;
  const int64_t at = c.Row(si, s, s.position + (row - s.row_begin));
  c.Write(at, k.data<const float>() + row * k.row_stride(), hd);
  c.Write(at + c.ValueOffset(), v.data<const float>() + row * v.row_stride(), hd);
}

void AttendToken(const Cache& c, int64_t si, const Segment& s, int64_t row, int h,
                 const TensorView& q, const TensorView& out, std::vector<float>& scores,
                 std::vector<float>& buf) {
  const AttentionParams& p = c.p;
  const int64_t d = p.head_dim, pos = s.position + (row - s.row_begin);
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
  const float* qh = q.data<const float>() + row * q.row_stride() + h * d;
  scores.resize(static_cast<size_t>(pos - lo + 1));
  float mx = -INFINITY;
  for (int64_t j = lo; j <= pos; ++j) {
    const float sc = p.scale * Dot(qh, c.Read(c.Row(si, s, j) + kvh * d, d, buf), d);
    scores[j - lo] = sc;
    mx = std::max(mx, sc);
  }
  float* o = out.data<float>() + row * out.row_stride() + h * d;
  std::fill_n(o, d, 0.0f);
  float sum = 0.0f;
  for (int64_t j = lo; j <= pos; ++j) {
    const float w = std::exp(scores[j - lo] - mx);
    sum += w;
    const float* vj = c.Read(c.Row(si, s, j) + c.ValueOffset() + kvh * d, d, buf);
    for (int64_t x = 0; x < d; ++x) o[x] += w * vj[x];
  }
  const float inv = 1.0f / sum;
  for (int64_t x = 0; x < d; ++x) o[x] *= inv;
}

}  // namespace

absl::Status Attention(const ExecContext&, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& p, const TensorView& out) {
  const Cache c{kv, segs.blocks, p};
  const int64_t n = static_cast<int64_t>(segs.host.size());
  if (kv.kind == KvCacheRef::Kind::kRing) {
    // Token by token within a segment; segments in parallel.
    ParallelFor<Schedule::kDynamic>(n, n > 1 && segs.total_tokens() > 64, [&](int64_t si) {
      const Segment& s = segs.host[si];
      std::vector<float> scores, buf;
      for (int64_t r = s.row_begin; r < s.row_begin + s.num_tokens; ++r) {
        WriteToken(c, si, s, r, k, v);
        for (int h = 0; h < p.q_heads; ++h) AttendToken(c, si, s, r, h, q, out, scores, buf);
      }
    });
    return absl::OkStatus();
  }
  for (int64_t si = 0; si < n; ++si) {
    const Segment& s = segs.host[si];
    for (int64_t r = s.row_begin; r < s.row_begin + s.num_tokens; ++r)
      WriteToken(c, si, s, r, k, v);
  }
  // Every (token, head) on its own: the cache holds all it needs.
  std::vector<std::pair<int64_t, int64_t>> rows;  // (segment, row)
  int64_t work = 0;
  for (int64_t si = 0; si < n; ++si) {
    const Segment& s = segs.host[si];
    for (int64_t r = s.row_begin; r < s.row_begin + s.num_tokens; ++r) rows.push_back({si, r});
    work += s.num_tokens * (s.position + s.num_tokens);
  }
  const int64_t units = static_cast<int64_t>(rows.size()) * p.q_heads;
  ParallelFor<Schedule::kDynamic>(
      units, work * p.q_heads * p.head_dim > (int64_t{1} << 20), [&](int64_t u) {
        thread_local std::vector<float> scores, buf;
        const auto [si, r] = rows[u / p.q_heads];
        AttendToken(c, si, segs.host[si], r, static_cast<int>(u % p.q_heads), q, out, scores, buf);
      });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
