// Fuzz target: safetensors files held in memory (SafetensorsFile::FromBuffer). Every accepted
// tensor's bytes are read and converted to f32 as WeightStore::Load does, so a view reaching
// outside the buffer shows up under ASan. An input starting with '{' is taken as the header
// JSON, then optionally a NUL and the data, and gets its 8-byte length prefix from the harness:
// mutations of the JSON then need not keep a length field in step. An F8_E4M3 matrix with a
// `<name>_scale_inv` (`_scales_inv`, `_scale`) beside it is dequantized as WeightStore does (blocks
// that tile it by the scale's shape, or the mismatch refused), and kept as stored: the same
// verdict, and the same values read back.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/tensor.h"
#include "models/fp8.h"
#include "models/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::string WithLengthPrefix(const std::string& input) {
  const size_t nul = input.find('\0');
  const std::string header = input.substr(0, nul);
  const std::string data = nul == std::string::npos ? "" : input.substr(nul + 1);
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(uint64_t{header.size()} >> (8 * i)));
  return out + header + data;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (!bytes.empty() && bytes[0] == '{') bytes = WithLengthPrefix(bytes);
  const size_t file_size = bytes.size();
  absl::StatusOr<std::unique_ptr<linfer::SafetensorsFile>> f =
      linfer::SafetensorsFile::FromBuffer(std::move(bytes), "fuzz.safetensors");
  if (!f.ok()) return 0;
  for (const auto& [name, entry] : (*f)->entries()) {
    Require(entry.begin <= entry.end && entry.end <= file_size, "offsets inside the file");
    absl::StatusOr<absl::string_view> bytes = (*f)->Data(name);
    Require(bytes.ok() && bytes->size() == entry.end - entry.begin, "raw bytes of every entry");
    auto scale = (*f)->entries().find(name + "_scale_inv");
    if (scale == (*f)->entries().end()) scale = (*f)->entries().find(name + "_scales_inv");
    if (scale == (*f)->entries().end()) scale = (*f)->entries().find(name + "_scale");
    if (entry.dtype == "F8_E4M3" && entry.shape.size() >= 2 && scale != (*f)->entries().end() &&
        linfer::NumElements(entry.shape) <= (int64_t{1} << 20)) {
      absl::StatusOr<linfer::TensorView> sview = (*f)->View(scale->first);
      absl::StatusOr<linfer::Tensor> s32 =
          sview.ok() ? linfer::ToF32(*sview) : absl::StatusOr<linfer::Tensor>(sview.status());
      if (s32.ok()) {
        // Blocks that tile the matrix by the scale's last two dimensions (a scale of rank < 2:
        // one block, a per-tensor scale).
        const size_t r = entry.shape.size();
        linfer::Shape sshape = scale->second.shape;
        while (sshape.size() < 2) sshape.insert(sshape.begin(), 1);
        const size_t sr = sshape.size();
        auto block = [](int64_t n, int64_t parts) {
          return parts > 0 ? std::max<int64_t>((n + parts - 1) / parts, 1) : 1;
        };
        const int64_t br = block(entry.shape[r - 2], sshape[sr - 2]);
        const int64_t bc = block(entry.shape[r - 1], sshape[sr - 1]);
        absl::StatusOr<linfer::Tensor> w =
            linfer::DequantizeFp8(name, reinterpret_cast<const uint8_t*>(bytes->data()),
                                  entry.shape, scale->first, *s32, br, bc);
        Require(
            w.ok() ? w->numel() == linfer::NumElements(entry.shape) : !w.status().message().empty(),
            "dequantized fp8: every element, or an error with a message");
        // Kept as stored (WeightStore's keep_fp8): accepted exactly when dequantizing is, and the
        // values the CPU's ops see (ToF32 of the scaled view) are the dequantized ones, bit for
        // bit.
        absl::StatusOr<linfer::Tensor> kept =
            linfer::KeepFp8(name, reinterpret_cast<const uint8_t*>(bytes->data()), entry.shape,
                            scale->first, *s32, br, bc);
        Require(kept.ok() == w.ok(), "fp8 kept exactly when it dequantizes");
        if (kept.ok()) {
          absl::StatusOr<linfer::Tensor> back = linfer::ToF32(kept->view());
          Require(back.ok() && back->nbytes() == w->nbytes() &&
                      (w->nbytes() == 0 ||
                       std::memcmp(back->data<void>(), w->data<void>(), w->nbytes()) == 0),
                  "kept fp8 reads back as the dequantized values");
        }
      }
    }
    absl::StatusOr<linfer::TensorView> view = (*f)->View(name);
    if (!view.ok()) continue;
    Require(view->numel() >= 0, "non-negative element count");
    Require(view->nbytes() == entry.end - entry.begin, "view size equals its byte range");
    const auto* p = static_cast<const unsigned char*>(view->raw());
    uint64_t sum = 0;
    for (size_t i = 0; i < view->nbytes(); ++i) sum += p[i];
    Require(sum <= 255 * uint64_t{view->nbytes()}, "every byte of the view is readable");
    absl::StatusOr<linfer::Tensor> f32 = linfer::ToF32(*view);
    Require(f32.ok() && f32->numel() == view->numel(), "f32 conversion of a valid view");
  }
  return 0;
}
