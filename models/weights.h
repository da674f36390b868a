// The tensors of a checkpoint directory: one or more *.safetensors files (with or without a
// model.safetensors.index.json). Bound by name with shape checks; converted to f32 on load.
// fp8 weights (models/fp8.h) are dequantized on load, or kept as stored where the device computes
// with them (Target::keep_fp8).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"
#include "models/fp8.h"
#include "models/safetensors.h"

namespace linfer {

// FNV-1a 64-bit hash of `bytes`, continuing from `h`.
uint64_t Fnv1a64(absl::string_view bytes, uint64_t h = 0xcbf29ce484222325ull);

class WeightStore {
 public:
  static absl::StatusOr<WeightStore> Open(const std::filesystem::path& dir);

  bool Has(const std::string& name) const { return where_.contains(name); }
  // Where Load and LoadMatrix put tensors (default: f32 on the CPU).
  struct Target {
    Device device = Device::kCpu;
    DType matrix_dtype = DType::kF32;  // matmul weights: f32, bf16, or f16 (CPU)
    // fp8 matmul weights kept as stored, with their scales (models/fp8.h KeepFp8; on CUDA the
    // bytes and scales uploaded, and the embedding table dequantized: CUDA gathers f32 or bf16
    // rows); else dequantized to matrix_dtype.
    bool keep_fp8 = false;
    // Other matmul weights quantized to fp8 on load (models/fp8.h QuantizeFp8, 128 × 128 blocks,
    // on the host; checkpoints without fp8 weights of their own), but for the embedding table and
    // the LM head (LoadTable) and the small gate projections fp8 checkpoints keep unquantized
    // (Fp8KeepsUnquantized).
    bool quantize_fp8 = false;
  };
  void set_target(Target target) { target_ = target; }
  const Target& target() const { return target_; }
  // fp8 checkpoints (the config's quantization_config, models/fp8.h): tensors stored as F8_E4M3
  // load dequantized with their scale tensors (`<name>` + scheme.scale_suffix). The default
  // (no quantization_config) refuses an F8_E4M3 tensor, naming it.
  void set_fp8(Fp8Scheme scheme) { fp8_ = std::move(scheme); }
  // The tensor as f32 on the host (an fp8 tensor dequantized). Errors name the tensor: missing,
  // wrong shape, unsupported dtype. Shapes match when equal after dropping size-1 dimensions other
  // than the last (conv [C,1,W] = [C,W]); the result has the expected shape.
  absl::StatusOr<Tensor> LoadHost(const std::string& name, const Shape& expected);
  // The stored tensor (a view into the mapped file: F32, BF16 or F16), after the same checks.
  absl::StatusOr<TensorView> Stored(const std::string& name, const Shape& expected);
  // f32 on the target device (norm weights, gates, conv kernels, biases).
  absl::StatusOr<Tensor> Load(const std::string& name, const Shape& expected);
  // A matmul weight (or embedding table): target.matrix_dtype on the target device. f16 refuses a
  // tensor with a finite value beyond its range (±65504), naming it. A tensor stored in the target
  // dtype (a bf16 checkpoint loaded as bf16) keeps its bytes: no f32 round trip, which is exact.
  // An fp8 tensor is kept as stored with its scales (target.keep_fp8), or dequantized to f32,
  // then converted.
  absl::StatusOr<Tensor> LoadMatrix(const std::string& name, const Shape& expected);
  // The embedding table or the LM head: LoadMatrix, never quantized on load.
  absl::StatusOr<Tensor> LoadTable(const std::string& name, const Shape& expected);
  // Matmul weights of one input width stacked by rows, in order, into one tensor (each part
  // loaded and checked as by LoadMatrix; [Σ rows, cols]): one GEMM then computes every part's
  // projection of the same input, its outputs side by side in the part order.
  absl::StatusOr<Tensor> LoadStacked(absl::Span<const std::pair<std::string, Shape>> parts);
  // Rows picked out of stored matmul weights and stacked, in order, into one tensor ([Σ rows,
  // cols]): each part contributes, for g = 0 … groups−1, rows [g·stride + begin, … + count) of
  // tensor `name` (checked against `shape` and converted as by LoadMatrix; count −1: every row).
  // LoadStacked is the case of whole tensors; groups serve checkpoints that interleave a
  // projection's parts (Qwen3-Next's per-key-head in_proj_qkvz), so one GEMM gets them in the
  // layout the model computes with. Every part is checked before the result is allocated. Parts
  // that are all fp8 weights kept as stored give an fp8 result with their rows' scales; a mix of
  // fp8 and other dtypes is dequantized (a model that wants its fp8 rows kept loads them apart).
  struct RowPick {
    std::string name;
    Shape shape;
    int64_t begin = 0, count = -1;
    int64_t groups = 1, stride = 0;
  };
  absl::StatusOr<Tensor> LoadPicked(absl::Span<const RowPick> parts);
  // The same rows as LoadPicked, as runs of consecutive parts that load alike: one tensor, unless
  // fp8 parts kept as stored sit beside parts of other dtypes — then each run of kept fp8 parts
  // and each run of the others is one tensor (models/stacked_weight.h multiplies them).
  absl::StatusOr<std::vector<Tensor>> LoadPickedRuns(absl::Span<const RowPick> parts);
  absl::StatusOr<std::vector<Tensor>> LoadStackedRuns(
      absl::Span<const std::pair<std::string, Shape>> parts);
  // A value the model computes (not stored in the checkpoint): f32 host → the target device.
  absl::StatusOr<Tensor> Constant(Tensor host) const {
    return Counted(ToTarget(std::move(host), DType::kF32));
  }
  // Stored dtype of the first tensor (for reporting).
  std::string StoredDType() const;
  // Names present in the checkpoint that no Load() asked for.
  std::vector<std::string> Unused() const;
  // 64-bit identity of the checkpoint: every tensor's name, dtype and shape, and a CRC-32 of
  // (up to) its first MiB. Together with the config it fingerprints a model for state blobs.
  uint64_t Fingerprint(uint64_t seed) const;
  // Elements of all tensors loaded so far (the parameter count once a model is bound).
  int64_t loaded_elements() const { return loaded_elements_; }
  // Bytes of the tensors Load, LoadMatrix, LoadStacked, LoadPicked and Constant returned so far,
  // as they are held (an fp8 weight's scales included).
  int64_t loaded_bytes() const { return loaded_bytes_; }

 private:
  absl::StatusOr<Tensor> ToTarget(Tensor host, DType dtype) const;
  // Whole tensors as RowPicks (LoadStacked, LoadStackedRuns).
  static std::vector<RowPick> WholeParts(absl::Span<const std::pair<std::string, Shape>> parts);
  // `t`, its bytes added to loaded_bytes.
  absl::StatusOr<Tensor> Counted(absl::StatusOr<Tensor> t) const;
  absl::StatusOr<Tensor> LoadPickedUncounted(absl::Span<const RowPick> parts);
  // The entry of `name` after the checks of Stored but the dtype's (present; its shape matches
  // `expected`), counted as used.
  absl::StatusOr<const SafetensorsFile::Entry*> Checked(const std::string& name,
                                                        const Shape& expected);
  // Whether `name` is stored as e4m3 fp8 (false for a name not in the checkpoint).
  bool IsFp8(const std::string& name) const;
  // Whether `name` is an fp8 weight that LoadMatrix and LoadPicked keep as stored.
  bool KeepsFp8(const std::string& name) const;
  // Whether LoadMatrix and LoadPicked quantize `name` on load (Target::quantize_fp8).
  bool QuantizesFp8(const std::string& name) const;
  // Either: the weight is held as fp8.
  bool HeldAsFp8(const std::string& name) const { return KeepsFp8(name) || QuantizesFp8(name); }
  // A weight held as fp8: kept as stored, or quantized on load.
  absl::StatusOr<Tensor> Fp8Held(const std::string& name, const Shape& expected);
  absl::StatusOr<Tensor> LoadMatrixImpl(const std::string& name, const Shape& expected,
                                        bool quantize);
  // An fp8 tensor dequantized with its scales (f32 on the host, shaped `expected`), or with `keep`
  // the weight as stored with its row-expanded scales (KeepFp8).
  absl::StatusOr<Tensor> Fp8Load(const std::string& name, const Shape& expected, bool keep);
  // LoadPicked's result when every part is kept as fp8: [rows, cols] with the picked scale rows.
  absl::StatusOr<Tensor> PickedFp8(absl::Span<const RowPick> parts, int64_t rows, int64_t cols);
  // A matmul weight's stored view when its bytes are kept as they are (stored in
  // target.matrix_dtype, not f32), else nullopt (it is converted: other dtypes, fp8); after the
  // checks of Stored (an fp8 tensor's dtype is read later, by its conversion).
  absl::StatusOr<std::optional<TensorView>> KeptBytes(const std::string& name,
                                                      const Shape& expected);
  // A matmul weight converted to target.matrix_dtype on the host, shaped `expected` (f16's
  // range checked; fp8 dequantized first).
  absl::StatusOr<Tensor> Converted(const std::string& name, const Shape& expected);
  // `host` on the target device (itself on the CPU).
  absl::StatusOr<Tensor> OnTarget(Tensor host) const;
  // A new tensor on the target device holding a copy of the host view.
  absl::StatusOr<Tensor> CopyToTarget(const TensorView& host) const;

  Target target_;
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
  std::set<std::string> used_;
  std::set<std::string> finite_;  // tensors scanned for NaN and infinities (Stored), once each
  int64_t loaded_elements_ = 0;
  mutable int64_t loaded_bytes_ = 0;
  Fp8Scheme fp8_;
};

}  // namespace linfer
