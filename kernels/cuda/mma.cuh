// Warp-level tensor-core tiles (the chunked recurrence, the tensor-core attention): mma.sync
// m16n8k16 with bf16 operands and f32 accumulators (sm_80+, so also Hopper), and loads of its
// fragments from shared memory. Fragment layouts (PTX ISA, "mma.m16n8k16", g = lane / 4,
// t = lane % 4; two bf16 per register, the lower index in the low half):
//   A 16×16 (row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                        a3 = A[g+8][2t+8..]
//   B 16×8 (k × n):      b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C 16×8 (f32):        c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// Shared-memory tiles are row-major bf16 with a leading dimension `ld` (elements, even; rows padded
// by 8 elements so that the 8 rows a fragment load touches fall in distinct banks).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace linfer::cuda {

using bf16 = __nv_bfloat16;

struct FragA {
  uint32_t r[4];
};
struct FragB {
  uint32_t r[2];
};
struct FragC {
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
};

__device__ inline int LaneG() { return (threadIdx.x & 31) >> 2; }
__device__ inline int LaneT() { return threadIdx.x & 3; }

// d += a · b (16×16 · 16×8).
__device__ inline void Mma(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d.c[0]), "+f"(d.c[1]), "+f"(d.c[2]), "+f"(d.c[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

__device__ inline uint32_t Pair(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ inline uint32_t Pack(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// A = the 16×16 tile at `p` (row-major, leading dimension ld).
__device__ inline FragA LoadA(const bf16* p, int ld) {
  const int g = LaneG(), t = LaneT();
  FragA a;
  a.r[0] = Pair(p + g * ld + 2 * t);
  a.r[1] = Pair(p + (g + 8) * ld + 2 * t);
  a.r[2] = Pair(p + g * ld + 2 * t + 8);
  a.r[3] = Pair(p + (g + 8) * ld + 2 * t + 8);
  return a;
}

// A = Xᵀ where X is the 16×16 tile at `p` (row-major): A[m][k] = X[k][m].
__device__ inline FragA LoadAT(const bf16* p, int ld) {
  const int g = LaneG(), t = LaneT();
  auto at = [&](int m, int k) { return p[k * ld + m]; };
  FragA a;
  a.r[0] = Pack(at(g, 2 * t), at(g, 2 * t + 1));
  a.r[1] = Pack(at(g + 8, 2 * t), at(g + 8, 2 * t + 1));
  a.r[2] = Pack(at(g, 2 * t + 8), at(g, 2 * t + 9));
  a.r[3] = Pack(at(g + 8, 2 * t + 8), at(g + 8, 2 * t + 9));
  return a;
}

// B (16×8, k × n) from B itself stored row-major: p points at B[k0][n0] ([k][n] layout).
__device__ inline FragB LoadB(const bf16* p, int ld) {
  const int g = LaneG(), t = LaneT();
  FragB b;
  b.r[0] = Pack(p[2 * t * ld + g], p[(2 * t + 1) * ld + g]);
  b.r[1] = Pack(p[(2 * t + 8) * ld + g], p[(2 * t + 9) * ld + g]);
  return b;
}

// B (16×8, k × n) from its transpose stored row-major: p points at Bᵀ[n0][k0] ([n][k] layout).
__device__ inline FragB LoadBT(const bf16* p, int ld) {
  const int g = LaneG(), t = LaneT();
  FragB b;
  b.r[0] = Pair(p + g * ld + 2 * t);
  b.r[1] = Pair(p + g * ld + 2 * t + 8);
  return b;
}

// acc[nt] += A · B for warp w's 16-row strip: A = rows 16w…16w+15 of the row-major tile `a`
// (leading dimension lda), B = columns 8nt…8nt+7 of a matrix given by its transpose `bt`
// (leading dimension ldb), over kSteps·16 of the inner dimension.
template <int kSteps, int kNt>
__device__ inline void MmaStrip(FragC (&acc)[kNt], const bf16* a, int lda, const bf16* bt,
                                int ldb) {
  const int w = threadIdx.x / 32;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const FragA fa = LoadA(a + 16 * w * lda + 16 * kk, lda);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) Mma(acc[nt], fa, LoadBT(bt + 8 * nt * ldb + 16 * kk, ldb));
  }
}

// Row and column (within its 16×8 tile) of accumulator element i of this lane.
__device__ inline int AccRow(int i) { return LaneG() + (i >= 2 ? 8 : 0); }
__device__ inline int AccCol(int i) { return 2 * LaneT() + (i & 1); }

}  // namespace linfer::cuda
