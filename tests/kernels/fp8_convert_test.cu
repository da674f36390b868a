// The device's f32 → e4m3 conversion of the fp8 KV cache (kernels/cuda/attention_args.cuh
// ToE4m3: cvt with __NV_SATFINITE) against the CPU's (kernels/tensor.h F32ToE4m3, itself tested
// equal to E4m3FromDouble on every high-bit pattern), byte for byte: the CPU and the GPU must store
// the same bytes for the same keys and values, or a state exported from one and imported into the
// other would continue differently. Inputs: every pattern of a float's upper 24 bits (sign,
// exponent, the mantissa's top 15 bits) four times, with the lower 8 bits 0x00 — which includes
// every exact halfway point of e4m3's rounding (on mantissa bit 19 or above, the bits below it
// zero), where ties go to even — and 0x80, 0xFF and a hashed byte, which put each such point just
// above its tie, where it must round away (4 × 2²⁴ values: ±0, f32 and e4m3 subnormals, the
// saturation at ±448, ±∞ and NaNs of both signs included).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/tensor.h"
#include "tests/testing/device_testing.h"

namespace linfer::cuda {
namespace {

constexpr int64_t kPatterns = int64_t{1} << 24;

__host__ __device__ inline uint32_t LowByte(uint32_t i, int pass) {
  switch (pass) {
    case 0:
      return 0x00u;
    case 1:
      return 0x80u;
    case 2:
      return 0xFFu;
    default:
      return (i * 2654435761u) >> 24;  // Knuth's multiplicative hash: a byte per pattern
  }
}

__host__ __device__ inline uint32_t Bits(uint32_t i, int pass) { return i << 8 | LowByte(i, pass); }

__global__ void ConvertKernel(int pass, unsigned char* out) {
  PdlEnter();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kPatterns) return;
  out[i] = ToE4m3(__uint_as_float(Bits(i, pass)));
}

TEST(Fp8ConvertDeviceTest, ToE4m3EqualsTheCpusConversionOnEveryHighBitPattern) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  unsigned char* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, kPatterns), cudaSuccess);
  std::vector<unsigned char> got(kPatterns);
  for (int pass = 0; pass < 4; ++pass) {
    LaunchKernel(ConvertKernel, static_cast<unsigned>(kPatterns / 256), 256, 0, nullptr, pass, dev);
    ASSERT_TRUE(CheckLaunch("ConvertKernel").ok());
    ASSERT_EQ(cudaMemcpy(got.data(), dev, kPatterns, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t wrong = 0;
    for (uint32_t i = 0; i < kPatterns; ++i) {
      const uint32_t bits = Bits(i, pass);
      float x;
      std::memcpy(&x, &bits, sizeof x);
      const uint8_t want = F32ToE4m3(x);
      if (got[i] != want && ++wrong <= 5) {
        ADD_FAILURE() << "pass " << pass << ": bits 0x" << std::hex << bits << " (" << x
                      << "): device 0x" << int{got[i]} << ", CPU 0x" << int{want};
      }
    }
    EXPECT_EQ(wrong, 0) << "pass " << pass;
  }
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

}  // namespace
}  // namespace linfer::cuda
