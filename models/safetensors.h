// Strict, memory-mapped safetensors reader: validates the header JSON, dtypes, shapes, offsets
// and file size before any tensor is handed out. Tensors are views into the mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"

namespace linfer {

class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;  // as written: "F32", "BF16", "F16", "I64", ...
    Shape shape;
    uint64_t begin = 0;  // byte offsets into the data buffer
    uint64_t end = 0;
  };

  // Maps and validates `path`. Errors name the file and what is wrong with it.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  // Validates a whole file held in memory (the same checks as Open); `name` stands for the path
  // in errors. Used by tests and the fuzz harness.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string bytes,
                                                                     const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A view of tensor `name` in its stored dtype (F32/BF16/F16 only). The data may be unaligned.
  absl::StatusOr<TensorView> View(const std::string& name) const;
  // The stored bytes of tensor `name`, whatever its dtype (end − begin of its entry).
  absl::StatusOr<absl::string_view> Data(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  // Parses the length prefix and header of the `size` file bytes at `bytes`.
  absl::Status Init(const char* bytes, uint64_t size);

  std::filesystem::path path_;
  void* map_ = nullptr;  // the mapping made by Open, or null
  size_t map_size_ = 0;
  std::string buffer_;          // the bytes given to FromBuffer
  const char* data_ = nullptr;  // start of the data buffer
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Parses and validates a header (the JSON after the 8-byte length) against a data buffer of
// `data_size` bytes. Exposed for tests; Open() calls it.
absl::StatusOr<std::map<std::string, SafetensorsFile::Entry>> ParseSafetensorsHeader(
    absl::string_view header, uint64_t data_size, std::map<std::string, std::string>* metadata);

}  // namespace linfer
