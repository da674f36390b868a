// State blob encoding and validation.
#include "engine/state_blob.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zlib.h"

namespace linfer {
namespace {

constexpr char kMagic[8] = {'L', 'N', 'F', 'R', 'S', 'T', 'A', 'T'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4;

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the project targets little-endian hosts
  out.append(b, sizeof(T));
}

template <typename T>
T Get(absl::string_view in, size_t offset) {
  T v;
  std::memcpy(&v, in.data() + offset, sizeof(T));
  return v;
}

uint32_t Crc(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

}  // namespace

std::string EncodeStateBlob(uint64_t model_fingerprint, absl::Span<const float> data,
                            int64_t position, std::optional<int32_t> pending) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() * sizeof(float) + 4);
  out.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kStateBlobVersion);
  Put<uint32_t>(out, 0);  // dtype: f32
  Put<uint64_t>(out, model_fingerprint);
  Put<uint64_t>(out, data.size());
  Put<int64_t>(out, position);
  Put<int32_t>(out, pending.value_or(-1));
  Put<uint32_t>(out, 0);
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  Put<uint32_t>(out, Crc(out));
  return out;
}

absl::StatusOr<StateSnapshot> DecodeStateBlob(absl::string_view blob, uint64_t model_fingerprint,
                                              int64_t state_floats) {
  if (blob.size() < kHeaderBytes + 4 || std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a linfer state blob (", blob.size(),
                                                   " bytes, missing the LNFRSTAT header)"));
  }
  const uint32_t version = Get<uint32_t>(blob, 8);
  if (version != kStateBlobVersion) {
    return absl::InvalidArgumentError(absl::StrCat("state blob format version ", version,
                                                   " is not supported (this build reads ",
                                                   kStateBlobVersion, ")"));
  }
  if (const uint32_t dtype = Get<uint32_t>(blob, 12); dtype != 0) {
    return absl::InvalidArgumentError(absl::StrCat("state blob dtype ", dtype, " is not f32"));
  }
  const uint64_t fp = Get<uint64_t>(blob, 16);
  const uint64_t floats = Get<uint64_t>(blob, 24);
  if (floats > (blob.size() - kHeaderBytes) / sizeof(float) ||
      blob.size() != kHeaderBytes + floats * sizeof(float) + 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("state blob is truncated or padded: ", blob.size(), " bytes for ", floats,
                     " state values"));
  }
  if (Get<uint32_t>(blob, blob.size() - 4) != Crc(blob.substr(0, blob.size() - 4))) {
    return absl::InvalidArgumentError("state blob checksum mismatch: the blob is corrupted");
  }
  if (fp != model_fingerprint) {
    return absl::InvalidArgumentError(
        absl::StrFormat("state blob belongs to another model (fingerprint %016x, this model "
                        "%016x)",
                        fp, model_fingerprint));
  }
  if (static_cast<int64_t>(floats) != state_floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state blob holds ", floats, " values, this model's state has ", state_floats));
  }
  StateSnapshot s;
  s.position = Get<int64_t>(blob, 32);
  const int32_t pending = Get<int32_t>(blob, 40);
  if (s.position < 0 || pending < -1) {
    return absl::InvalidArgumentError("state blob has a negative position or pending token");
  }
  if (pending >= 0) s.pending = pending;
  s.data.resize(floats);
  std::memcpy(s.data.data(), blob.data() + kHeaderBytes, floats * sizeof(float));
  return s;
}

}  // namespace linfer
