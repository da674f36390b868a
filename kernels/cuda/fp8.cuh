// e4m3 (fp8, kernels/tensor.h kF8E4M3) bytes to f32 on the device: exact, every e4m3 value being
// an f16 (cvt e4m3 → f16, sm_89+). NaN bytes do not occur (Tensor::Scaled's precondition).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace linfer::cuda {

// Two bytes, the first in the low byte.
__device__ __forceinline__ float2 E4m3x2(unsigned short two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ float E4m3(unsigned char one) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(one, __NV_E4M3);
  return __half2float(__half(h));
}

}  // namespace linfer::cuda
