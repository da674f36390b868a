// Fuzz target: safetensors files held in memory (SafetensorsFile::FromBuffer). Every accepted
// tensor's bytes are read and converted to f32 as WeightStore::Load does, so a view reaching
// outside the buffer shows up under ASan. An input starting with '{' is taken as the header
// JSON, then optionally a NUL and the data, and gets its 8-byte length prefix from the harness:
// mutations of the JSON then need not keep a length field in step.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/tensor.h"
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
