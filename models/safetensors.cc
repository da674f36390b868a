// Safetensors: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // the safetensors library's MAX_HEADER_SIZE
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 62;

// Element size of every dtype the format defines; 0 for names it does not define.
size_t ElementSize(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid safetensors header: ", what));
}

// At most 64 bytes of a name (cut on a character boundary) for an error message: a header may
// hold megabyte-long names.
std::string Excerpt(absl::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return std::string(text);
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return absl::StrCat(text.substr(0, n), "... (", text.size(), " bytes)");
}

// One tensor entry {"dtype", "shape", "data_offsets"}, checked against a data buffer of
// `data_size` bytes. The byte count of every shape is at most kMaxTensorBytes, so neither the
// element count, nor any partial product of dimensions, nor the byte count can overflow int64.
absl::StatusOr<SafetensorsFile::Entry> ParseEntry(const std::string& name,
                                                  const nlohmann::json& value, uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", Excerpt(name), "': ");
  if (!value.is_object()) return Bad(where + "entry is not an object");
  auto dtype = value.find("dtype");
  auto shape = value.find("shape");
  auto offsets = value.find("data_offsets");
  if (dtype == value.end() || !dtype->is_string()) return Bad(where + "missing string 'dtype'");
  if (shape == value.end() || !shape->is_array()) return Bad(where + "missing array 'shape'");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
    return Bad(where + "'data_offsets' must be [begin, end]");
  }
  SafetensorsFile::Entry e;
  e.dtype = dtype->get<std::string>();
  const uint64_t elem = ElementSize(e.dtype);
  if (elem == 0) return Bad(absl::StrCat(where, "unknown dtype '", Excerpt(e.dtype), "'"));
  const uint64_t max_elements = kMaxTensorBytes / elem;
  uint64_t numel = 1, nonzero = 1;  // product of all dimensions, and of the non-zero ones
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return Bad(where + "shape entries must be non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v > max_elements || (v != 0 && nonzero > max_elements / v)) {
      return Bad(absl::StrCat(where, "shape is too large (more than ", kMaxTensorBytes,
                              " bytes of ", e.dtype, ")"));
    }
    if (v != 0) nonzero *= v;
    numel *= v;
    e.shape.push_back(static_cast<int64_t>(v));
  }
  for (const auto& o : *offsets) {
    if (!o.is_number_unsigned()) return Bad(where + "data_offsets must be non-negative integers");
  }
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.begin > e.end) return Bad(where + "data_offsets begin > end");
  if (e.end > data_size) {
    return Bad(absl::StrCat(where, "data_offsets end ", e.end, " is past the end of the data (",
                            data_size, " bytes): the file is truncated or corrupt"));
  }
  if (e.end - e.begin != numel * elem) {
    return Bad(absl::StrCat(where, "shape ", ShapeString(e.shape), " of ", e.dtype, " needs ",
                            numel * elem, " bytes but data_offsets cover ", e.end - e.begin));
  }
  return e;
}

// The first key of the top-level object given twice, found in one SAX pass (stops there).
class TopLevelKeys : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string twice;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ != 1 || keys_.insert(k).second) return true;
    twice = k;
    return false;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  int depth_ = 0;
  std::unordered_set<std::string> keys_;
};

}  // namespace

absl::StatusOr<std::map<std::string, SafetensorsFile::Entry>> ParseSafetensorsHeader(
    absl::string_view header, uint64_t data_size, std::map<std::string, std::string>* metadata) {
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("the header is not valid JSON");
  // A key given twice (JSON keeps one of them silently) is named: the other's bytes would then
  // show as a gap. (A SAX pass: a parser callback makes nlohmann's parse quadratic in the keys.)
  TopLevelKeys keys;
  nlohmann::json::sax_parse(header, &keys);
  if (!keys.twice.empty()) {
    return Bad(absl::StrCat("the header names '", Excerpt(keys.twice), "' twice"));
  }
  if (!j.is_object()) return Bad("the header JSON is not an object");
  std::map<std::string, SafetensorsFile::Entry> entries;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return Bad("__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return Bad(absl::StrCat("__metadata__ value '", Excerpt(k), "' is not a string"));
        }
        if (metadata != nullptr) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsFile::Entry e, ParseEntry(name, value, data_size));
    entries.emplace(name, std::move(e));
  }
  // Tensors must not overlap, and (as the format requires) must cover the buffer exactly.
  std::vector<std::pair<uint64_t, const std::string*>> order;
  for (const auto& [name, e] : entries) order.push_back({e.begin, &name});
  std::sort(order.begin(), order.end());
  uint64_t cursor = 0;
  for (const auto& [begin, name] : order) {
    const auto& e = entries.at(*name);
    if (e.begin < cursor && e.end > e.begin) {
      return Bad(absl::StrCat("tensor '", Excerpt(*name), "' overlaps the previous tensor (offset ",
                              e.begin, " < ", cursor, ")"));
    }
    if (e.begin > cursor) {
      return Bad(absl::StrCat("gap of ", e.begin - cursor, " unindexed bytes before tensor '",
                              Excerpt(*name), "'"));
    }
    cursor = std::max(cursor, e.end);
  }
  if (cursor != data_size) {
    return Bad(
        absl::StrCat("the data buffer has ", data_size, " bytes but the tensors cover ", cursor));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  const std::string p = path.string();
  // O_NONBLOCK: a FIFO in a file's place is refused below, not waited on.
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", p, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", p));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(p, " is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(p, ": file of ", size, " bytes is too short for a safetensors header"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap ", p, ": ", std::strerror(errno)));
  }
  f->map_ = map;
  f->map_size_ = size;
  RETURN_IF_ERROR(f->Init(static_cast<const char*>(map), size));
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(
    std::string bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->buffer_ = std::move(bytes);
  RETURN_IF_ERROR(f->Init(f->buffer_.data(), f->buffer_.size()));
  return f;
}

absl::Status SafetensorsFile::Init(const char* bytes, uint64_t size) {
  const std::string p = path_.string();
  if (size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ": file of ", size, " bytes is too short for a safetensors header"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(bytes[i]);
  if (header_len > size - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ": header length ", header_len, " exceeds the file size (", size,
                     " bytes): the file is truncated or not safetensors"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": header of ", header_len,
                                                   " bytes is larger than the ", kMaxHeaderBytes,
                                                   " bytes a safetensors header may have"));
  }
  data_ = bytes + 8 + header_len;
  absl::StatusOr<std::map<std::string, Entry>> entries = ParseSafetensorsHeader(
      absl::string_view(bytes + 8, header_len), size - 8 - header_len, &metadata_);
  if (!entries.ok()) {
    return absl::Status(entries.status().code(), absl::StrCat(p, ": ", entries.status().message()));
  }
  entries_ = *std::move(entries);
  return absl::OkStatus();
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::StatusOr<TensorView> SafetensorsFile::View(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not in ", path_.string()));
  }
  const Entry& e = it->second;
  DType dtype;
  if (e.dtype == "F32") {
    dtype = DType::kF32;
  } else if (e.dtype == "BF16") {
    dtype = DType::kBF16;
  } else if (e.dtype == "F16") {
    dtype = DType::kF16;
  } else {
    return absl::UnimplementedError(absl::StrCat("tensor '", name, "' in ", path_.string(),
                                                 " has dtype ", e.dtype,
                                                 "; supported: F32, BF16, F16"));
  }
  return TensorView(const_cast<char*>(data_ + e.begin), dtype, e.shape);
}

absl::StatusOr<absl::string_view> SafetensorsFile::Data(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not in ", path_.string()));
  }
  return absl::string_view(data_ + it->second.begin, it->second.end - it->second.begin);
}

}  // namespace linfer
