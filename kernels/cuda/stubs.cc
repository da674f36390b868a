// The CUDA twins when the build has no CUDA backend: every op reports that the device is not
// available, so a CPU-only build links and fails cleanly if a CUDA context is ever asked for.
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/resources.h"

namespace linfer::cuda {
namespace {

absl::Status NoCuda() {
  return absl::UnavailableError("this build of linfer has no CUDA backend (LINFER_CUDA=OFF)");
}

}  // namespace

absl::StatusOr<void*> Allocate(size_t) { return NoCuda(); }
void Free(void*) {}
absl::Status ZeroSync(void*, size_t) { return NoCuda(); }
absl::StatusOr<void*> AllocatePinned(size_t) { return NoCuda(); }
void FreePinned(void*) {}
int DeviceCount() { return 0; }
absl::StatusOr<std::pair<int64_t, int64_t>> MemoryFreeTotal() { return NoCuda(); }
absl::Status Upload(const ExecContext&, const void*, const TensorView&) { return NoCuda(); }
absl::Status Download(const ExecContext&, const TensorView&, void*) { return NoCuda(); }
absl::Status CopyTensor(const ExecContext&, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status ZeroTensor(const ExecContext&, const TensorView&) { return NoCuda(); }
absl::Status ZeroTensors(const ExecContext&, absl::Span<const TensorView>) { return NoCuda(); }
absl::Status CopyTensors(const ExecContext&, absl::Span<const TensorView>,
                         absl::Span<const TensorView>) {
  return NoCuda();
}
absl::Status Synchronize(const ExecContext&) { return NoCuda(); }
absl::StatusOr<std::unique_ptr<OpTimer>> CreateOpTimer() { return NoCuda(); }
absl::StatusOr<bool> TryRmsNormLinear(const ExecContext&, const TensorView&, const TensorView&,
                                      const NormParams&, const TensorView&, const TensorView&) {
  return NoCuda();
}
bool RmsNormLinearFolds(int64_t, const TensorView&) { return false; }
absl::Status LinearFp8(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                       const TensorView*, bool) {
  return NoCuda();
}
const char* Fp8Path(int64_t, const TensorView&) { return "widen"; }
absl::StatusOr<std::shared_ptr<DownloadStager>> MakeDownloadStager(size_t, int) { return NoCuda(); }
absl::StatusOr<std::shared_ptr<PendingCopy>> DownloadGathered(
    const ExecContext&, absl::Span<const TensorView>, void*,
    const std::shared_ptr<DownloadStager>&) {
  return NoCuda();
}
absl::Status Linear(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                    const TensorView*, bool) {
  return NoCuda();
}
absl::Status SwiGluLinear(const ExecContext&, const TensorView&, const TensorView&,
                          const TensorView&, const TensorView&, bool) {
  return NoCuda();
}
bool Bf16MatmulInputs() { return false; }
GemmTuneStats GemmTuning() { return {}; }
absl::Status RmsNorm(const ExecContext&, const TensorView&, const TensorView&, const NormParams&,
                     const TensorView&) {
  return NoCuda();
}
absl::Status AddRmsNorm(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                        const NormParams&, const TensorView&) {
  return NoCuda();
}
absl::Status GatedRmsNorm(const ExecContext&, const TensorView&, const TensorView&,
                          const TensorView&, const NormParams&, Activation, const TensorView&) {
  return NoCuda();
}
absl::Status L2Normalize(const ExecContext&, const TensorView&, int64_t, float, const TensorView&) {
  return NoCuda();
}
absl::Status SumNormalize(const ExecContext&, const TensorView&, int64_t, float,
                          const TensorView&) {
  return NoCuda();
}
absl::Status Activate(const ExecContext&, Activation, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status SwiGlu(const ExecContext&, const TensorView&, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status Add(const ExecContext&, const TensorView&, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status Mul(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                 Activation) {
  return NoCuda();
}
absl::Status GdnGates(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                      const TensorView&, float, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status SigmoidScale(const ExecContext&, const TensorView&, float, const TensorView&) {
  return NoCuda();
}
absl::Status GlaDecay(const ExecContext&, const TensorView&, float, float, const TensorView&) {
  return NoCuda();
}
absl::Status Fill(const ExecContext&, float, const TensorView&) { return NoCuda(); }
absl::Status FeatureMap(const ExecContext&, FeatureMapKind, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status Rope(const ExecContext&, const TensorView&, const Segments&, const RopeParams&) {
  return NoCuda();
}
absl::Status HeadNormRope(const ExecContext&, const TensorView&, const TensorView&, const Segments&,
                          const HeadNormRopeParams&, const TensorView&) {
  return NoCuda();
}
absl::Status ShortConvs(const ExecContext&, absl::Span<const ConvGroup>, const Segments&,
                        Activation) {
  return NoCuda();
}
absl::Status Embedding(const ExecContext&, const TensorView&, const TensorView&,
                       const TensorView&) {
  return NoCuda();
}
absl::Status GatherRows(const ExecContext&, const TensorView&, const TensorView&,
                        const TensorView&) {
  return NoCuda();
}
absl::Status Recurrence(const ExecContext&, const RecurrenceSpec&, const RecurrenceInputs&,
                        const Segments&, const TensorView&, const TensorView&,
                        const RecurrenceOptions&, const TensorView&) {
  return NoCuda();
}
int64_t MinChunkTokens(const RecurrenceSpec&, const RecurrenceOptions&) { return INT64_MAX; }

absl::Status Attention(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                       const Segments&, const KvCacheRef&, const AttentionParams&,
                       const TensorView&) {
  return NoCuda();
}

int64_t MaxPresampleK(int64_t) { return 0; }

absl::Status Presample(const ExecContext&, const TensorView&, const PresampleOutput&,
                       const PresampleDraws*) {
  return NoCuda();
}

absl::Status SetDevice(int) { return NoCuda(); }
absl::StatusOr<void*> CreateStream() { return NoCuda(); }
void DestroyStream(void*) {}
absl::Status CreateBlas(size_t, BlasResources*) { return NoCuda(); }
void DestroyBlas(BlasResources*) {}
absl::Status BeginCapture(void*) { return NoCuda(); }
absl::StatusOr<void*> EndCapture(void*) { return NoCuda(); }
absl::Status LaunchGraph(void*, void*) { return NoCuda(); }
void DestroyGraph(void*) {}

absl::Status LayerNorm(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                       const NormParams&, const TensorView&) {
  return NoCuda();
}
absl::Status TokenShift(const ExecContext&, const TensorView&, const Segments&, const TensorView&,
                        const TensorView&) {
  return NoCuda();
}
absl::Status MixRows(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                     const TensorView&) {
  return NoCuda();
}
absl::Status Rwkv7Keys(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                       const TensorView&, int64_t, bool, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status Rwkv7ValueResidual(const ExecContext&, const TensorView&, const TensorView&,
                                const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status Rwkv7Bonus(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                        const TensorView&, const TensorView&, const TensorView&, int64_t,
                        const TensorView&) {
  return NoCuda();
}
absl::Status Rwkv7Recurrence(const ExecContext&, const Rwkv7Inputs&, const Segments&,
                             const TensorView&, const RecurrenceOptions&, const TensorView&) {
  return NoCuda();
}

absl::Status Mamba2Gates(const ExecContext&, const TensorView&, const TensorView&,
                         const TensorView&, float, float, const TensorView&, const TensorView&) {
  return NoCuda();
}
absl::Status ScaleGroups(const ExecContext&, const TensorView&, const TensorView&, bool,
                         const TensorView&) {
  return NoCuda();
}
absl::Status BiasActivate(const ExecContext&, const TensorView&, const TensorView&, Activation,
                          const TensorView&) {
  return NoCuda();
}

absl::Status MoeRoute(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                      bool) {
  return NoCuda();
}
absl::Status MoeExperts(const ExecContext&, const TensorView&, const TensorView&, const TensorView&,
                        const TensorView&, const TensorView&, const MoeShared*, const TensorView&,
                        bool) {
  return NoCuda();
}

}  // namespace linfer::cuda
