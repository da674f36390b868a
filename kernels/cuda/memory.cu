// Device memory and the byte moves of kernels/transfer.h on CUDA: cudaMalloc / cudaHostAlloc,
// asynchronous H2D / D2H copies on the context's stream, strided device copies and zero fills as
// 2-D memcpy/memset (a [rows, cols] view with a row stride is a pitched 2-D array), and stream
// synchronisation. The copy engines and the driver's memset do the work, but for ZeroTensors and
// GatherTensors: one kernel zeroes or copies up to kMaxZeroRanges contiguous byte ranges (16-byte
// accesses where a range allows).
#include <algorithm>
#include <cstdint>

#include "common/logging.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

// Bytes per leading-dimension row and the pitch between rows of a (possibly strided) view.
struct Pitched {
  size_t row_bytes, pitch, rows;
};
Pitched AsPitched(const TensorView& t) {
  const size_t esize = DTypeSize(t.dtype());
  if (t.contiguous() || t.rank() < 2 || t.dim(0) == 0) return {t.nbytes(), t.nbytes(), 1};
  const size_t rows = static_cast<size_t>(t.dim(0));
  return {t.nbytes() / rows, static_cast<size_t>(t.row_stride()) * esize, rows};
}

}  // namespace

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return n;
}

absl::StatusOr<std::pair<int64_t, int64_t>> MemoryFreeTotal() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::pair{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

absl::StatusOr<void*> Allocate(size_t bytes) {
  BeforeHostWait();  // an op-timing gate (kernels/op_timer.h) must not hold what the host awaits
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StrCat("cudaMalloc(", bytes, " bytes)").c_str(), __FILE__,
                      __LINE__);
  }
  return p;
}

void Free(void* p) {
  BeforeHostWait();
  const cudaError_t err = cudaFree(p);
  if (err != cudaSuccess)
    Log(LogLevel::kError, absl::StrCat("cudaFree: ", cudaGetErrorString(err)));
}

absl::Status ZeroSync(void* p, size_t bytes) {
  BeforeHostWait();
  CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, bytes));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::StatusOr<void*> AllocatePinned(size_t bytes) {
  BeforeHostWait();
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StrCat("cudaHostAlloc(", bytes, " bytes)").c_str(), __FILE__,
                      __LINE__);
  }
  return p;
}

void FreePinned(void* p) {
  BeforeHostWait();
  const cudaError_t err = cudaFreeHost(p);
  if (err != cudaSuccess)
    Log(LogLevel::kError, absl::StrCat("cudaFreeHost: ", cudaGetErrorString(err)));
}

absl::Status Upload(const ExecContext& ctx, const void* host, const TensorView& dst) {
  BeforeHostWait();  // from pageable memory the copy may wait for the stream
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst.raw(), host, dst.nbytes(), cudaMemcpyHostToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status Download(const ExecContext& ctx, const TensorView& src, void* host) {
  BeforeHostWait();
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst) {
  const Pitched s = AsPitched(src), d = AsPitched(dst);
  if (s.rows == 1 && d.rows == 1) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, Stream(ctx)));
    return absl::OkStatus();
  }
  // Same shape, so the same row bytes; a contiguous side has pitch = row bytes.
  const size_t rows = static_cast<size_t>(src.dim(0));
  const size_t row_bytes = src.nbytes() / rows;
  const size_t spitch = s.rows == 1 ? row_bytes : s.pitch;
  const size_t dpitch = d.rows == 1 ? row_bytes : d.pitch;
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst.raw(), dpitch, src.raw(), spitch, row_bytes, rows,
                                         cudaMemcpyDeviceToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst) {
  const Pitched d = AsPitched(dst);
  if (d.rows == 1) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst.raw(), 0, dst.nbytes(), Stream(ctx)));
  } else {
    CUDA_RETURN_IF_ERROR(
        cudaMemset2DAsync(dst.raw(), d.pitch, 0, d.row_bytes, d.rows, Stream(ctx)));
  }
  return absl::OkStatus();
}

namespace {

// Contiguous byte ranges for RangesKernel: dst ← src, or dst ← 0 where src is null.
struct ByteRanges {
  const unsigned char* src[kMaxZeroRanges];
  unsigned char* dst[kMaxZeroRanges];
  uint64_t bytes[kMaxZeroRanges];
};

// blockIdx.y = range; the blocks along x stride over its bytes, 16 at a time where the range's
// ends allow.
__global__ void RangesKernel(ByteRanges r) {
  PdlEnter();
  const unsigned char* src = r.src[blockIdx.y];
  unsigned char* dst = r.dst[blockIdx.y];
  const uint64_t n = r.bytes[blockIdx.y];
  const uint64_t start = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t step = uint64_t{gridDim.x} * blockDim.x;
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint64_t i = start; i < n / 16; i += step) {
      d[i] = src != nullptr ? s[i] : make_uint4(0, 0, 0, 0);
    }
    for (uint64_t i = n / 16 * 16 + start; i < n; i += step) dst[i] = src != nullptr ? src[i] : 0;
  } else {
    for (uint64_t i = start; i < n; i += step) dst[i] = src != nullptr ? src[i] : 0;
  }
}

// Collects ranges and launches RangesKernel for every kMaxZeroRanges of them.
class RangeBatch {
 public:
  RangeBatch(cudaStream_t stream, int max_blocks) : stream_(stream), max_blocks_(max_blocks) {}
  absl::Status Add(const void* src, void* dst, uint64_t bytes) {
    r_.src[n_] = static_cast<const unsigned char*>(src);
    r_.dst[n_] = static_cast<unsigned char*>(dst);
    r_.bytes[n_] = bytes;
    largest_ = std::max(largest_, bytes);
    return ++n_ == kMaxZeroRanges ? Flush() : absl::OkStatus();
  }
  absl::Status Flush() {
    if (n_ == 0) return absl::OkStatus();
    constexpr int kThreads = 256;
    const uint64_t blocks =
        std::min<uint64_t>((largest_ + 16 * kThreads - 1) / (16 * kThreads), max_blocks_);
    LaunchKernel(
        RangesKernel,
        dim3(static_cast<unsigned>(std::max<uint64_t>(blocks, 1)), static_cast<unsigned>(n_)),
        kThreads, 0, stream_, r_);
    n_ = 0;
    largest_ = 0;
    return CheckLaunch("RangesKernel");
  }

 private:
  const cudaStream_t stream_;
  const int max_blocks_;
  ByteRanges r_{};
  int n_ = 0;
  uint64_t largest_ = 0;
};

}  // namespace

absl::Status ZeroTensors(const ExecContext& ctx, absl::Span<const TensorView> dsts) {
  RangeBatch batch(Stream(ctx), 256);
  for (const TensorView& dst : dsts) {
    if (dst.numel() == 0) continue;
    if (!dst.contiguous()) {  // a pitched view: the driver's 2-D memset
      RETURN_IF_ERROR(cuda::ZeroTensor(ctx, dst));
      continue;
    }
    RETURN_IF_ERROR(batch.Add(nullptr, dst.raw(), dst.nbytes()));
  }
  return batch.Flush();
}

absl::Status CopyTensors(const ExecContext& ctx, absl::Span<const TensorView> srcs,
                         absl::Span<const TensorView> dsts) {
  RangeBatch batch(Stream(ctx), 512);
  for (size_t i = 0; i < srcs.size(); ++i) {
    if (srcs[i].numel() == 0 ||
        (srcs[i].raw() == dsts[i].raw() && srcs[i].row_stride() == dsts[i].row_stride())) {
      continue;  // the same view (the dispatcher refuses any other overlap)
    }
    if (!srcs[i].contiguous() || !dsts[i].contiguous()) {  // pitched: the driver's 2-D copy
      RETURN_IF_ERROR(cuda::CopyTensor(ctx, srcs[i], dsts[i]));
      continue;
    }
    RETURN_IF_ERROR(batch.Add(srcs[i].raw(), dsts[i].raw(), srcs[i].nbytes()));
  }
  return batch.Flush();
}

absl::Status GatherTensors(void* stream, absl::Span<const TensorView> srcs, unsigned char* dst) {
  RangeBatch batch(static_cast<cudaStream_t>(stream), 512);
  for (const TensorView& src : srcs) {
    if (src.nbytes() == 0) continue;
    RETURN_IF_ERROR(batch.Add(src.raw(), dst, src.nbytes()));
    dst += src.nbytes();
  }
  return batch.Flush();
}

absl::Status Synchronize(const ExecContext& ctx) {
  BeforeHostWait();
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(Stream(ctx)));
  return absl::OkStatus();
}

}  // namespace linfer::cuda
