// Small single-threaded row-major matrix products for per-head work inside parallel regions
// (where calling the multithreaded BLAS would oversubscribe the cores). Leading dims in floats.
#pragma once

#include <cstdint>

namespace linfer::cpu {

// Dot product of two contiguous vectors (vectorised reduction).
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// y += alpha · x over n contiguous floats.
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// C[m,n] (+)= A[m,k] · B[k,n]
inline void MatMul(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                   int64_t m, int64_t n, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (!accumulate) {
      for (int64_t j = 0; j < n; ++j) ci[j] = 0.0f;
    }
    for (int64_t p = 0; p < k; ++p) Axpy(a[i * lda + p], b + p * ldb, ci, n);
  }
}

// C[m,n] (+)= A[m,k] · B[n,k]ᵀ
inline void MatMulBT(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, int64_t m, int64_t n, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float d = Dot(a + i * lda, b + j * ldb, k);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + d : d;
    }
  }
}

// C[m,n] (+)= A[k,m]ᵀ · B[k,n]
inline void MatMulAT(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (!accumulate) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t i = 0; i < m; ++i) Axpy(a[p * lda + i], b + p * ldb, c + i * ldc, n);
  }
}

}  // namespace linfer::cpu
