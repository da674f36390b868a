// WeightStore: locates tensors across the checkpoint's safetensors files.
#include "models/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "kernels/transfer.h"
#include "nlohmann/json.hpp"
#include "zlib.h"

namespace linfer {
namespace {

// model.safetensors.index.json: a map of tensor names (thousands) to shard files.
constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;
constexpr int kMaxIndexDepth = 16;

// The first element of n IEEE values of `Bits` width whose exponent bits are all set (NaN or
// ±infinity), or -1; `nan` says which. Unaligned data (safetensors offsets are byte offsets).
template <typename Bits>
int64_t FirstNonFinite(const char* data, int64_t n, Bits exponent, bool* nan) {
  for (int64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, data + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    if ((b & exponent) == exponent) {
      *nan = (b & static_cast<Bits>(~exponent) & static_cast<Bits>(exponent - 1)) != 0;
      return i;
    }
  }
  return -1;
}

// A weight that holds NaN or an infinity (a corrupt download or conversion) makes every output
// NaN: refused at load, naming it.
absl::Status CheckFinite(const std::string& name, const TensorView& v) {
  const char* data = static_cast<const char*>(v.raw());
  int64_t at = -1;
  bool nan = false;
  switch (v.dtype()) {
    case DType::kF32:
      at = FirstNonFinite<uint32_t>(data, v.numel(), 0x7F800000u, &nan);
      break;
    case DType::kBF16:
      at = FirstNonFinite<uint16_t>(data, v.numel(), 0x7F80u, &nan);
      break;
    case DType::kF16:
      at = FirstNonFinite<uint16_t>(data, v.numel(), 0x7C00u, &nan);
      break;
    case DType::kF64:
      at = FirstNonFinite<uint64_t>(data, v.numel(), 0x7FF0000000000000ull, &nan);
      break;
    default:
      break;
  }
  if (at < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' holds ",
                                                 nan ? "NaN" : "an infinity", " at element ", at,
                                                 ": the checkpoint is corrupt"));
}

Shape Squeeze(const Shape& s) {
  Shape out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 1 || i + 1 == s.size()) out.push_back(s[i]);
  }
  return out;
}

absl::StatusOr<std::vector<std::filesystem::path>> ListFiles(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  const auto index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(index, ec)) {
    ASSIGN_OR_RETURN(const std::string text, ReadFile(index.string(), kMaxIndexBytes));
    if (JsonDeeperThan(text, kMaxIndexDepth)) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": nested deeper than ", kMaxIndexDepth, " levels"));
    }
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": not valid JSON with a 'weight_map' object"));
    }
    std::set<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index.string(), ": weight_map['", tensor, "'] is not a file name"));
      }
      // Shards are files of this directory: no paths out of it (an absolute name or "..").
      const std::string name = file.get<std::string>();
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index.string(), ": weight_map['", tensor, "'] names '", name.substr(0, 64),
                         "', which is not a file name in the checkpoint directory"));
      }
      names.insert(name);
    }
    for (const auto& n : names) files.push_back(dir / n);
    return files;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory ", dir.string(), " does not exist"));
  }
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no *.safetensors file in ", dir.string()));
  }
  return files;
}

}  // namespace

absl::StatusOr<WeightStore> WeightStore::Open(const std::filesystem::path& dir) {
  WeightStore store;
  store.dir_ = dir;
  ASSIGN_OR_RETURN(std::vector<std::filesystem::path> files, ListFiles(dir));
  for (const auto& path : files) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
    std::shared_ptr<SafetensorsFile> shared = std::move(f);
    for (const auto& [name, entry] : shared->entries()) {
      auto [it, inserted] = store.where_.emplace(name, shared.get());
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' appears in both ",
                                                       it->second->path().string(), " and ",
                                                       path.string()));
      }
    }
    store.files_.push_back(std::move(shared));
  }
  return store;
}

absl::StatusOr<Tensor> WeightStore::Counted(absl::StatusOr<Tensor> t) const {
  if (t.ok()) {
    const TensorView& v = t->view();
    loaded_bytes_ += static_cast<int64_t>(v.nbytes());
    if (v.has_scales() && v.dim(-1) > 0) {
      loaded_bytes_ += v.numel() / v.dim(-1) * v.scale_cols() * static_cast<int64_t>(sizeof(float));
    }
  }
  return t;
}

absl::StatusOr<Tensor> WeightStore::Load(const std::string& name, const Shape& expected) {
  ASSIGN_OR_RETURN(Tensor host, LoadHost(name, expected));
  return Counted(ToTarget(std::move(host), DType::kF32));
}

absl::StatusOr<Tensor> WeightStore::LoadMatrix(const std::string& name, const Shape& expected) {
  return LoadMatrixImpl(name, expected, /*quantize=*/true);
}

absl::StatusOr<Tensor> WeightStore::LoadTable(const std::string& name, const Shape& expected) {
  return LoadMatrixImpl(name, expected, /*quantize=*/false);
}

absl::StatusOr<Tensor> WeightStore::LoadMatrixImpl(const std::string& name, const Shape& expected,
                                                   bool quantize) {
  // Embedding tables stay fp8 on the CPU only (CUDA gathers f32 or bf16 rows).
  if ((KeepsFp8(name) && (quantize || target_.device == Device::kCpu)) ||
      (quantize && QuantizesFp8(name))) {
    ASSIGN_OR_RETURN(Tensor held, Fp8Held(name, expected));
    return Counted(OnTarget(std::move(held)));
  }
  ASSIGN_OR_RETURN(std::optional<TensorView> kept, KeptBytes(name, expected));
  if (kept) return Counted(CopyToTarget(kept->Reshaped(expected)));  // straight from the file
  ASSIGN_OR_RETURN(Tensor host, Converted(name, expected));
  return Counted(OnTarget(std::move(host)));
}

absl::StatusOr<std::optional<TensorView>> WeightStore::KeptBytes(const std::string& name,
                                                                 const Shape& expected) {
  if (IsFp8(name)) {  // always converted
    RETURN_IF_ERROR(Checked(name, expected).status());
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(TensorView stored, Stored(name, expected));
  if (stored.dtype() == target_.matrix_dtype && stored.dtype() != DType::kF32) return stored;
  return std::nullopt;
}

absl::StatusOr<Tensor> WeightStore::Converted(const std::string& name, const Shape& expected) {
  ASSIGN_OR_RETURN(Tensor host, LoadHost(name, expected));
  if (target_.matrix_dtype == DType::kF16) {
    const float* v = host.data<const float>();
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (std::isfinite(v[i]) && std::abs(v[i]) > 65504.0f) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "' holds ", v[i], " at element ", i,
                         ", beyond f16's range (--weight_dtype f16); use bf16 or f32"));
      }
    }
  }
  if (target_.matrix_dtype == DType::kF32) return host;
  return FromF32(host.view(), target_.matrix_dtype);
}

std::vector<WeightStore::RowPick> WeightStore::WholeParts(
    absl::Span<const std::pair<std::string, Shape>> parts) {
  std::vector<RowPick> whole;
  whole.reserve(parts.size());
  for (const auto& [name, shape] : parts) whole.push_back({name, shape});
  return whole;
}

absl::StatusOr<Tensor> WeightStore::LoadStacked(
    absl::Span<const std::pair<std::string, Shape>> parts) {
  return LoadPicked(WholeParts(parts));
}

absl::StatusOr<Tensor> WeightStore::LoadPicked(absl::Span<const RowPick> parts) {
  return Counted(LoadPickedUncounted(parts));
}

absl::StatusOr<std::vector<Tensor>> WeightStore::LoadPickedRuns(absl::Span<const RowPick> parts) {
  if (parts.empty()) return LoadPicked(parts).status();  // its error
  std::vector<Tensor> runs;
  size_t begin = 0;
  for (size_t i = 1; i <= parts.size(); ++i) {
    if (i < parts.size() && HeldAsFp8(parts[i].name) == HeldAsFp8(parts[begin].name)) continue;
    ASSIGN_OR_RETURN(Tensor run, LoadPicked(parts.subspan(begin, i - begin)));
    runs.push_back(std::move(run));
    begin = i;
  }
  return runs;
}

absl::StatusOr<std::vector<Tensor>> WeightStore::LoadStackedRuns(
    absl::Span<const std::pair<std::string, Shape>> parts) {
  return LoadPickedRuns(WholeParts(parts));
}

absl::StatusOr<Tensor> WeightStore::LoadPickedUncounted(absl::Span<const RowPick> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("LoadPicked: no parts");
  const int64_t cols = parts.front().shape.size() == 2 ? parts.front().shape[1] : -1;
  int64_t rows = 0;
  for (const RowPick& p : parts) {
    if (p.shape.size() != 2 || p.shape[1] != cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", p.name, "' is not a matrix as wide as '", parts.front().name, "'"));
    }
    const int64_t count = p.count < 0 ? p.shape[0] : p.count;
    if (p.begin < 0 || p.groups < 1 || p.stride < 0 ||
        (p.groups - 1) * p.stride + p.begin + count > p.shape[0]) {
      return absl::InternalError(
          absl::StrCat("LoadPicked: rows of '", p.name, "' outside its ", p.shape[0], " rows"));
    }
    rows += p.groups * count;
  }
  // Every part present with its shape (and a dtype linfer reads) before the result is allocated:
  // a checkpoint that does not fit the config is named, not answered with a failed allocation of
  // the config's size.
  for (const RowPick& p : parts) RETURN_IF_ERROR(KeptBytes(p.name, p.shape).status());
  if (std::all_of(parts.begin(), parts.end(),
                  [&](const RowPick& p) { return HeldAsFp8(p.name); })) {
    return PickedFp8(parts, rows, cols);
  }
  // Gathered on the host (the rows copied from the file or from its conversion), then one upload.
  ASSIGN_OR_RETURN(Tensor picked, Tensor::Empty(target_.matrix_dtype, {rows, cols}));
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(target_.matrix_dtype);
  char* at = static_cast<char*>(picked.data<void>());
  std::string converted_name;  // parts of one tensor in a row share its conversion
  Tensor converted;
  for (const RowPick& p : parts) {
    ASSIGN_OR_RETURN(std::optional<TensorView> kept, KeptBytes(p.name, p.shape));
    if (!kept) {
      if (p.name != converted_name) {
        ASSIGN_OR_RETURN(converted, Converted(p.name, p.shape));
        converted_name = p.name;
      }
    }
    const TensorView stored = kept ? *kept : converted.view();
    const size_t bytes = static_cast<size_t>(p.count < 0 ? p.shape[0] : p.count) * row_bytes;
    for (int64_t g = 0; g < p.groups; ++g) {
      std::memcpy(at, static_cast<const char*>(stored.raw()) + (g * p.stride + p.begin) * row_bytes,
                  bytes);
      at += bytes;
    }
  }
  return OnTarget(std::move(picked));
}

absl::StatusOr<Tensor> WeightStore::PickedFp8(absl::Span<const RowPick> parts, int64_t rows,
                                              int64_t cols) {
  // One scheme and one width: every part's scales have the same blocks of columns (checked).
  const auto block_cols_of = [&](const RowPick& p) {
    return KeepsFp8(p.name) ? fp8_.Blocks(p.shape[0], cols).second : kFp8QuantizeBlock;
  };
  const int64_t block_cols = block_cols_of(parts.front());
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  ASSIGN_OR_RETURN(Tensor values, Tensor::Empty(DType::kF8E4M3, {rows, cols}));
  ASSIGN_OR_RETURN(Tensor scales, Tensor::Empty(DType::kF32, {rows, scale_cols}));
  int64_t at = 0;
  Tensor source;  // the tensor of the current part, held while consecutive parts pick from it
  const std::string* source_name = nullptr;
  for (const RowPick& p : parts) {
    if (source_name == nullptr || *source_name != p.name) {
      source = Tensor();  // the previous one's memory goes before the next one loads
      ASSIGN_OR_RETURN(source, Fp8Held(p.name, p.shape));
      source_name = &p.name;
    }
    const TensorView w = source.view();
    if (w.scale_block_cols() != block_cols) {
      return absl::InternalError(absl::StrCat("fp8 tensor '", p.name, "' scaled in blocks of ",
                                              w.scale_block_cols(), " columns, '",
                                              parts.front().name, "' of ", block_cols));
    }
    const int64_t count = p.count < 0 ? p.shape[0] : p.count;
    if (count * cols == 0) continue;
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t from = g * p.stride + p.begin;
      std::memcpy(values.data<uint8_t>() + at * cols, w.data<const uint8_t>() + from * cols,
                  static_cast<size_t>(count * cols));
      std::memcpy(scales.data<float>() + at * scale_cols, w.scales() + from * scale_cols,
                  static_cast<size_t>(count * scale_cols) * sizeof(float));
      at += count;
    }
  }
  ASSIGN_OR_RETURN(Tensor picked, Tensor::Scaled(std::move(values), std::move(scales), block_cols));
  return OnTarget(std::move(picked));
}

absl::StatusOr<Tensor> WeightStore::ToTarget(Tensor host, DType dtype) const {
  if (dtype == DType::kF32) return OnTarget(std::move(host));
  ASSIGN_OR_RETURN(Tensor converted, FromF32(host.view(), dtype));
  return OnTarget(std::move(converted));
}

absl::StatusOr<Tensor> WeightStore::OnTarget(Tensor host) const {
  if (target_.device == Device::kCpu) return host;
  const TensorView v = host.view();
  if (v.has_scales()) {  // an fp8 weight: its e4m3 bytes and its scales, each uploaded
    Shape scale_shape = v.shape();
    scale_shape.back() = v.scale_cols();
    ASSIGN_OR_RETURN(Tensor values, CopyToTarget(TensorView(v.raw(), v.dtype(), v.shape())));
    ASSIGN_OR_RETURN(Tensor scales, CopyToTarget(TensorView(const_cast<float*>(v.scales()),
                                                            DType::kF32, scale_shape)));
    return Tensor::Scaled(std::move(values), std::move(scales), v.scale_block_cols());
  }
  return CopyToTarget(v);
}

absl::StatusOr<Tensor> WeightStore::CopyToTarget(const TensorView& host) const {
  if (host.has_scales()) {  // a copy would leave the scales behind
    return absl::InternalError(absl::StrCat("an fp8 weight ", host.DebugString(), " copied"));
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(host.dtype(), host.shape(), target_.device));
  ExecContext ctx;
  ctx.device = target_.device;
  RETURN_IF_ERROR(Upload(ctx, host.raw(), out.view()));  // the CPU: a copy
  RETURN_IF_ERROR(Synchronize(ctx));
  return out;
}

absl::StatusOr<Tensor> WeightStore::LoadHost(const std::string& name, const Shape& expected) {
  if (IsFp8(name)) return Fp8Load(name, expected, /*keep=*/false);
  ASSIGN_OR_RETURN(TensorView view, Stored(name, expected));
  ASSIGN_OR_RETURN(Tensor t, ToF32(view));
  RETURN_IF_ERROR(t.Reshape(expected));
  return t;
}

absl::StatusOr<const SafetensorsFile::Entry*> WeightStore::Checked(const std::string& name,
                                                                   const Shape& expected) {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return absl::NotFoundError(absl::StrCat("missing tensor '", name, "' (expected shape ",
                                            ShapeString(expected), ") in checkpoint ",
                                            dir_.string()));
  }
  const SafetensorsFile::Entry& e = it->second->entries().at(name);
  if (Squeeze(e.shape) != Squeeze(expected)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                   ShapeString(e.shape), ", expected ",
                                                   ShapeString(expected), " from config.json"));
  }
  if (used_.insert(name).second) loaded_elements_ += NumElements(e.shape);
  return &e;
}

absl::StatusOr<TensorView> WeightStore::Stored(const std::string& name, const Shape& expected) {
  RETURN_IF_ERROR(Checked(name, expected).status());
  ASSIGN_OR_RETURN(TensorView v, where_.at(name)->View(name));
  if (!finite_.contains(name)) {
    RETURN_IF_ERROR(CheckFinite(name, v));
    finite_.insert(name);
  }
  return v;
}

bool WeightStore::KeepsFp8(const std::string& name) const {
  return target_.keep_fp8 && IsFp8(name);
}

bool WeightStore::QuantizesFp8(const std::string& name) const {
  return target_.quantize_fp8 && fp8_.strategy == Fp8Scheme::Strategy::kNone && Has(name) &&
         !IsFp8(name) && !Fp8KeepsUnquantized(name);
}

absl::StatusOr<Tensor> WeightStore::Fp8Held(const std::string& name, const Shape& expected) {
  if (KeepsFp8(name)) return Fp8Load(name, expected, /*keep=*/true);
  ASSIGN_OR_RETURN(Tensor host, LoadHost(name, expected));
  if (host.rank() < 2) {
    return absl::InternalError(absl::StrCat("tensor '", name, "' of shape ",
                                            ShapeString(host.shape()), " quantized to fp8"));
  }
  return QuantizeFp8(name, host, kFp8QuantizeBlock, kFp8QuantizeBlock);
}

bool WeightStore::IsFp8(const std::string& name) const {
  auto it = where_.find(name);
  return it != where_.end() && it->second->entries().at(name).dtype == "F8_E4M3";
}

absl::StatusOr<Tensor> WeightStore::Fp8Load(const std::string& name, const Shape& expected,
                                            bool keep) {
  ASSIGN_OR_RETURN(const SafetensorsFile::Entry* e, Checked(name, expected));
  if (fp8_.strategy == Fp8Scheme::Strategy::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name,
        "' is stored as F8_E4M3, but config.json has no quantization_config (quant_method \"fp8\" "
        "or \"compressed-tensors\") to say how it is scaled"));
  }
  if (e->shape.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 tensor '", name, "' of shape ", ShapeString(e->shape),
                     ": fp8 weights must be matrices (or stacks of them)"));
  }
  // The scale's name: `<name>_scale_inv` or `<name>_scale` (the scheme's), or the plural older
  // transformers wrote for fused experts (FP8Expert's `gate_up_proj_scales_inv`).
  std::string scale_name = name + fp8_.scale_suffix;
  if (!Has(scale_name) && fp8_.scale_suffix == "_scale_inv" && Has(name + "_scales_inv")) {
    scale_name = name + "_scales_inv";
  }
  auto it = where_.find(scale_name);
  if (it == where_.end()) {
    return absl::NotFoundError(absl::StrCat("fp8 tensor '", name, "' has no scale tensor '",
                                            scale_name, "' in checkpoint ", dir_.string()));
  }
  if (Has(name + "_zero_point")) {  // compressed-tensors' asymmetric weights: Q − z, not Q
    return absl::UnimplementedError(absl::StrCat("fp8 tensor '", name, "' has a zero point ('",
                                                 name,
                                                 "_zero_point'): asymmetric fp8 weights are "
                                                 "not supported"));
  }
  ASSIGN_OR_RETURN(TensorView stored_scale, it->second->View(scale_name));
  used_.insert(scale_name);  // read, but not counted among the model's parameters
  ASSIGN_OR_RETURN(Tensor scale, ToF32(stored_scale));
  ASSIGN_OR_RETURN(absl::string_view bytes, where_.at(name)->Data(name));
  const size_t rank = e->shape.size();
  const auto [block_rows, block_cols] = fp8_.Blocks(e->shape[rank - 2], e->shape[rank - 1]);
  const uint8_t* q = reinterpret_cast<const uint8_t*>(bytes.data());
  // Expected shapes differ from stored ones only by size-1 dimensions (Checked): the last one
  // stays, which a kept weight's scales need.
  if (keep) {
    if (expected.empty() || expected.back() != e->shape.back()) {
      return absl::InternalError(absl::StrCat("fp8 tensor '", name, "' of shape ",
                                              ShapeString(e->shape), " kept as ",
                                              ShapeString(expected)));
    }
    ASSIGN_OR_RETURN(Tensor w,
                     KeepFp8(name, q, e->shape, scale_name, scale, block_rows, block_cols));
    RETURN_IF_ERROR(w.Reshape(expected));
    return w;
  }
  ASSIGN_OR_RETURN(Tensor w,
                   DequantizeFp8(name, q, e->shape, scale_name, scale, block_rows, block_cols));
  RETURN_IF_ERROR(w.Reshape(expected));
  return w;
}

std::string WeightStore::StoredDType() const {
  for (const auto& f : files_) {
    if (!f->entries().empty()) return f->entries().begin()->second.dtype;
  }
  return "none";
}

std::vector<std::string> WeightStore::Unused() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : where_) {
    if (!used_.contains(name)) out.push_back(name);
  }
  return out;
}

uint64_t Fnv1a64(absl::string_view bytes, uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t WeightStore::Fingerprint(uint64_t seed) const {
  uint64_t h = seed;
  for (const auto& [name, file] : where_) {
    const SafetensorsFile::Entry& e = file->entries().at(name);
    h = Fnv1a64(absl::StrCat(name, "|", e.dtype, "|", ShapeString(e.shape), "|"), h);
    // The bytes of the dtypes linfer reads (fp8 too); the others count by name and shape only
    // (as before fp8 was read: fingerprints of existing checkpoints stay what they were).
    if (!file->View(name).ok() && e.dtype != "F8_E4M3") continue;
    absl::StatusOr<absl::string_view> bytes = file->Data(name);
    if (!bytes.ok()) continue;
    const size_t n = std::min<size_t>(bytes->size(), size_t{1} << 20);
    const uLong crc =
        crc32(0L, reinterpret_cast<const Bytef*>(bytes->data()), static_cast<uInt>(n));
    h = Fnv1a64(absl::StrCat(crc), h);
  }
  return h;
}

}  // namespace linfer
