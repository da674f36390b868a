// State blob encoding (v2) and validated decoding (v2 and v1).
#include "engine/state_blob.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

using Json = nlohmann::json;

constexpr char kMagic[8] = {'L', 'N', 'F', 'R', 'S', 'T', 'A', 'T'};
constexpr size_t kV1HeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4;
constexpr size_t kMaxHeaderBytes = 1 << 20;
constexpr int kMaxHeaderDepth = 8;  // the v2 header nests 4 levels

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

// Non-throwing field reads (a hostile header must never throw).
std::string StrField(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::optional<int64_t> IntField(const Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return std::nullopt;
  }
  return it->get<int64_t>();
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("state blob: ", what));
}

// The model's sections in payload order: the slot-resident ones, then (hybrid models) each paged
// KV layer's [kv_tokens, ...spec] keys and values. A blob holds every section in f32 whatever the
// state's dtype in memory (bf16 recurrent states on CUDA are widened on export and rounded back
// on import), so a blob moves between servers with any --state_dtype and device.
struct Section {
  std::string name;
  const StateSpec* spec;
  Shape shape;
  int64_t bytes;       // in the blob (f32)
  int64_t host_bytes;  // in the HostState (the spec's dtype)
};
std::vector<Section> Sections(const BlobModel& model, int64_t kv_tokens) {
  std::vector<Section> out, paged;
  for (size_t l = 0; l < model.specs->size(); ++l) {
    for (const StateSpec& s : (*model.specs)[l]) {
      const std::string name = absl::StrCat("layers.", l, ".", s.name);
      const int64_t elements = NumElements(s.shape);
      const int64_t host = elements * static_cast<int64_t>(DTypeSize(s.dtype));
      if (s.kind != StateKind::kPaged) {
        out.push_back({name, &s, s.shape, elements * 4, host});
      } else {
        Shape shape = {kv_tokens};
        shape.insert(shape.end(), s.shape.begin(), s.shape.end());
        paged.push_back({name, &s, shape, kv_tokens * elements * 4, kv_tokens * host});
      }
    }
  }
  out.insert(out.end(), paged.begin(), paged.end());
  return out;
}

// One section's values from the host dtype to the blob's f32 (appended to `out`), and back (a value
// beyond the host dtype's range is refused by name; but an fp8 KV cache saturates at ±448, as it
// does when it stores a key or value).
absl::Status WidenTo(const Section& s, const uint8_t* host, std::string& out) {
  const TensorView view(const_cast<uint8_t*>(host), s.spec->dtype, {s.bytes / 4});
  ASSIGN_OR_RETURN(const Tensor wide, ToF32(view));
  out.append(wide.data<const char>(), wide.nbytes());
  return absl::OkStatus();
}
absl::Status NarrowFrom(const Section& s, const uint8_t* blob, uint8_t* host) {
  std::vector<float> aligned;  // FromF32 reads floats: a blob in a caller's buffer may be unaligned
  if (reinterpret_cast<uintptr_t>(blob) % alignof(float) != 0) {
    aligned.resize(static_cast<size_t>(s.bytes / 4));
    std::memcpy(aligned.data(), blob, static_cast<size_t>(s.bytes));
    blob = reinterpret_cast<const uint8_t*>(aligned.data());
  }
  const TensorView view(const_cast<uint8_t*>(blob), DType::kF32, {s.bytes / 4});
  ASSIGN_OR_RETURN(const Tensor narrow, FromF32(view, s.spec->dtype));
  if (s.spec->dtype != DType::kF32) {
    ASSIGN_OR_RETURN(const Tensor back, ToF32(narrow.view()));
    for (int64_t i = 0; i < back.numel(); ++i) {
      if (!std::isfinite(back.data<const float>()[i])) {
        return Bad(absl::StrCat("section ", s.name, " value ", view.data<const float>()[i], " at ",
                                i, " does not fit ", DTypeName(s.spec->dtype)));
      }
    }
  }
  std::memcpy(host, narrow.data<const void>(), narrow.nbytes());
  return absl::OkStatus();
}

bool HasKv(const BlobModel& model) {
  for (const LayerStateSpecs& layer : *model.specs) {
    for (const StateSpec& s : layer) {
      if (s.kind == StateKind::kPaged) return true;
    }
  }
  return false;
}
int64_t TotalBytes(const std::vector<Section>& sections) {
  int64_t n = 0;
  for (const Section& s : sections) n += s.bytes;
  return n;
}

// `data` holds the sections back to back, in f32.
absl::Status CheckFinite(const std::vector<Section>& sections, const uint8_t* data) {
  size_t offset = 0;
  for (const Section& s : sections) {
    const uint8_t* p = data + offset;
    for (int64_t i = 0; i < s.bytes / 4; ++i) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      if (!std::isfinite(v)) {
        return Bad(absl::StrCat("section ", s.name, " holds a NaN or Inf at ", i));
      }
    }
    offset += static_cast<size_t>(s.bytes);
  }
  return absl::OkStatus();
}

// Splits the (f32) payload into the host state's slot bytes and KV bytes, in the specs' dtypes.
absl::Status FillState(const std::vector<Section>& sections, const uint8_t* data, int64_t kv_tokens,
                       HostState* state) {
  int64_t slot = 0, kv = 0;
  for (const Section& s : sections) {
    (s.spec->kind == StateKind::kPaged ? kv : slot) += s.host_bytes;
  }
  state->bytes.resize(static_cast<size_t>(slot));
  state->kv_bytes.resize(static_cast<size_t>(kv));
  size_t in = 0, slot_at = 0, kv_at = 0;
  for (const Section& s : sections) {
    const bool paged = s.spec->kind == StateKind::kPaged;
    uint8_t* out = paged ? state->kv_bytes.data() + kv_at : state->bytes.data() + slot_at;
    RETURN_IF_ERROR(NarrowFrom(s, data + in, out));
    (paged ? kv_at : slot_at) += static_cast<size_t>(s.host_bytes);
    in += static_cast<size_t>(s.bytes);
  }
  state->kv_tokens = kv > 0 || kv_tokens > 0 ? kv_tokens : 0;
  return absl::OkStatus();
}

absl::Status CheckScalars(const BlobModel& model, int64_t position, int64_t pending) {
  if (position < 0 || position > model.max_position) {
    return Bad(absl::StrCat("position ", position, " is outside [0, ", model.max_position, "]"));
  }
  if (pending < -1 || pending >= model.vocab_size) {
    return Bad(absl::StrCat("pending token ", pending, " is outside the vocabulary [0, ",
                            model.vocab_size, ")"));
  }
  // The pending token is the session's too: position + 1 tokens.
  if (pending >= 0 && position >= model.max_position) {
    return Bad(absl::StrCat("position ", position, " and a pending token make ", position + 1,
                            " tokens, past ", model.max_position));
  }
  return absl::OkStatus();
}

absl::StatusOr<StateSnapshot> DecodeV1(absl::string_view blob, const BlobModel& model) {
  if (blob.size() < kV1HeaderBytes + 4) return Bad("truncated version-1 header");
  if (HasKv(model)) return Bad("version-1 blobs hold no attention KV; this model needs it");
  const std::vector<Section> sections = Sections(model, 0);
  const int64_t total = TotalBytes(sections);
  if (Get<uint32_t>(blob, 12) != 0) return Bad("version-1 dtype is not f32");
  const uint64_t floats = Get<uint64_t>(blob, 24);
  if (floats > (blob.size() - kV1HeaderBytes) / 4 ||
      blob.size() != kV1HeaderBytes + floats * 4 + 4) {
    return Bad(
        absl::StrCat("truncated or padded: ", blob.size(), " bytes for ", floats, " values"));
  }
  if (Get<uint32_t>(blob, blob.size() - 4) != Crc32(blob.substr(0, blob.size() - 4))) {
    return Bad("checksum mismatch: the blob is corrupted");
  }
  if (Get<uint64_t>(blob, 16) != model.fingerprint)
    return Bad("it belongs to another model (fingerprint mismatch)");
  if (static_cast<int64_t>(floats) * 4 != total) {
    return Bad(absl::StrCat("it holds ", floats * 4, " bytes of state, this model's has ", total));
  }
  const int64_t position = Get<int64_t>(blob, 32);
  const int32_t pending = Get<int32_t>(blob, 40);
  RETURN_IF_ERROR(CheckScalars(model, position, pending));
  StateSnapshot s;
  s.state.position = position;
  if (pending >= 0) s.pending = pending;
  const uint8_t* data = reinterpret_cast<const uint8_t*>(blob.data()) + kV1HeaderBytes;
  RETURN_IF_ERROR(CheckFinite(sections, data));
  RETURN_IF_ERROR(FillState(sections, data, 0, &s.state));
  return s;
}

// Reads and checks the v2 header's section table against the model.
absl::Status CheckSectionTable(const Json& table, const std::vector<Section>& sections) {
  if (!table.is_array() || table.size() != sections.size()) {
    return Bad(absl::StrCat("the section table does not list this model's ", sections.size(),
                            " state sections"));
  }
  int64_t offset = 0;
  for (size_t i = 0; i < sections.size(); ++i) {
    const Json& e = table[i];
    const Section& sec = sections[i];
    std::vector<int64_t> shape(sec.shape.begin(), sec.shape.end());
    if (!e.is_object() || StrField(e, "name") != sec.name ||
        StrField(e, "dtype") != DTypeName(DType::kF32) || !e.contains("shape") ||
        e["shape"] != Json(shape) || IntField(e, "offset") != offset ||
        IntField(e, "bytes") != sec.bytes) {
      return Bad(absl::StrCat("section ", i, " is not ", sec.name, " ", DTypeName(DType::kF32),
                              ShapeString(sec.shape), " at offset ", offset,
                              " (another model, or a malformed table)"));
    }
    offset += sec.bytes;
  }
  return absl::OkStatus();
}

absl::Status ReadMeta(const Json& j, StateSnapshot* s) {
  if (!j.contains("session")) return absl::OkStatus();
  const Json& m = j["session"];
  SessionMeta meta;
  meta.id = StrField(m, "id");
  meta.owner_tag = StrField(m, "owner_tag");
  if (meta.id.empty() || meta.owner_tag.empty()) return Bad("malformed session metadata");
  for (auto [key, field] : {std::pair{"turns", &meta.turns},
                            {"created_unix", &meta.created_unix},
                            {"last_used_unix", &meta.last_used_unix}}) {
    if (m.contains(key)) {
      const std::optional<int64_t> v = IntField(m, key);
      if (!v) return Bad(absl::StrCat("session ", key, " is not an integer"));
      *field = *v;
    }
  }
  s->session = std::move(meta);
  return absl::OkStatus();
}

// The optional text tail: at most kMaxTextTail ids of the vocabulary.
absl::Status ReadTextTail(const Json& j, int64_t vocab_size, StateSnapshot* s) {
  const auto tail = j.find("text_tail");
  if (tail == j.end()) return absl::OkStatus();
  if (!tail->is_array() || tail->size() > kMaxTextTail) {
    return Bad(absl::StrCat("text_tail is not an array of at most ", kMaxTextTail, " token ids"));
  }
  for (const Json& id : *tail) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return Bad(
          absl::StrCat("text_tail holds ", id.dump(), ", not a token id in [0, ", vocab_size, ")"));
    }
    s->text_tail.push_back(id.get<int32_t>());
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MaxStateBlobBytes(const BlobModel& model) {
  const int64_t slot = TotalBytes(Sections(model, 0));
  const int64_t kv_per_token = TotalBytes(Sections(model, 1)) - slot;
  return slot + std::min<int64_t>(model.max_position, int64_t{1} << 40) * kv_per_token +
         kMaxHeaderBytes + 64;
}

absl::StatusOr<std::string> EncodeStateBlob(const BlobModel& model, const StateSnapshot& snapshot) {
  const std::vector<Section> sections = Sections(model, snapshot.state.kv_tokens);
  int64_t slot_bytes = 0, kv_bytes = 0;
  for (const Section& s : sections) {
    (s.spec->kind == StateKind::kPaged ? kv_bytes : slot_bytes) += s.host_bytes;
  }
  if (static_cast<int64_t>(snapshot.state.bytes.size()) != slot_bytes ||
      static_cast<int64_t>(snapshot.state.kv_bytes.size()) != kv_bytes) {
    return absl::InternalError(
        absl::StrCat("state blob: a host state of ", snapshot.state.bytes.size(), " + ",
                     snapshot.state.kv_bytes.size(), " KV bytes is not this model's ", slot_bytes,
                     " + ", kv_bytes));
  }
  Json table = Json::array();
  int64_t offset = 0;
  for (const Section& s : sections) {
    table.push_back({{"name", s.name},
                     {"dtype", std::string(DTypeName(DType::kF32))},
                     {"shape", std::vector<int64_t>(s.shape.begin(), s.shape.end())},
                     {"offset", offset},
                     {"bytes", s.bytes}});
    offset += s.bytes;
  }
  Json header = {{"model_fingerprint", absl::StrFormat("%016x", model.fingerprint)},
                 {"position", snapshot.state.position},
                 {"pending", snapshot.pending.value_or(-1)},
                 {"sections", table}};
  if (!snapshot.text_tail.empty()) header["text_tail"] = snapshot.text_tail;
  if (snapshot.session) {
    const SessionMeta& m = *snapshot.session;
    header["session"] = {{"id", m.id},
                         {"owner_tag", m.owner_tag},
                         {"turns", m.turns},
                         {"created_unix", m.created_unix},
                         {"last_used_unix", m.last_used_unix}};
  }
  const std::string json = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(16 + json.size() + 8 + snapshot.state.total_bytes() + 4);
  out.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kStateBlobVersion);
  Put<uint32_t>(out, static_cast<uint32_t>(json.size()));
  out.append(json);
  out.append((8 - out.size() % 8) % 8, '\0');
  size_t slot_at = 0, kv_at = 0;
  for (const Section& s : sections) {
    const bool paged = s.spec->kind == StateKind::kPaged;
    RETURN_IF_ERROR(WidenTo(
        s, paged ? snapshot.state.kv_bytes.data() + kv_at : snapshot.state.bytes.data() + slot_at,
        out));
    (paged ? kv_at : slot_at) += static_cast<size_t>(s.host_bytes);
  }
  Put<uint32_t>(out, Crc32(out));
  return out;
}

absl::StatusOr<StateSnapshot> DecodeStateBlob(absl::string_view blob, const BlobModel& model) {
  if (blob.size() < 20 || std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return Bad(absl::StrCat("not a linfer state blob (", blob.size(),
                            " bytes, missing the LNFRSTAT header)"));
  }
  const uint32_t version = Get<uint32_t>(blob, 8);
  if (version == 1) return DecodeV1(blob, model);
  if (version != kStateBlobVersion) {
    return Bad(absl::StrCat("format version ", version,
                            " is not supported (this build reads 1 and ", kStateBlobVersion, ")"));
  }
  const size_t header_bytes = Get<uint32_t>(blob, 12);
  if (header_bytes > kMaxHeaderBytes || 16 + header_bytes + 4 > blob.size()) {
    return Bad(absl::StrCat("header of ", header_bytes, " bytes does not fit the blob"));
  }
  const size_t payload = (16 + header_bytes + 7) / 8 * 8;
  // The slot-resident state has a fixed size; the KV of hybrid models adds a multiple of its
  // bytes per token (checked against the header's position below).
  const std::vector<Section> fixed = Sections(model, 0);
  const int64_t slot_total = TotalBytes(fixed);
  const int64_t kv_per_token = TotalBytes(Sections(model, 1)) - slot_total;
  const int64_t rest = static_cast<int64_t>(blob.size()) - static_cast<int64_t>(payload) - 4;
  if (rest < slot_total || (kv_per_token == 0 && rest != slot_total) ||
      (kv_per_token > 0 && (rest - slot_total) % kv_per_token != 0)) {
    return Bad(absl::StrCat(
        blob.size(), " bytes do not hold this model's ", slot_total, " bytes of state",
        kv_per_token > 0 ? absl::StrCat(" + ", kv_per_token, " KV bytes per token") : "",
        " (truncated, padded, or another model)"));
  }
  if (Get<uint32_t>(blob, blob.size() - 4) != Crc32(blob.substr(0, blob.size() - 4))) {
    return Bad("checksum mismatch: the blob is corrupted");
  }
  // The header nests 4 levels (sections → a section → its shape); a deep one would make copies
  // and comparisons of its values recurse once per level (a crash at ~100,000 levels).
  const absl::string_view header = blob.substr(16, header_bytes);
  if (JsonDeeperThan(header, kMaxHeaderDepth)) {
    return Bad(absl::StrCat("the header nests deeper than ", kMaxHeaderDepth, " levels"));
  }
  const Json j = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Bad("the header is not a JSON object");
  if (StrField(j, "model_fingerprint") != absl::StrFormat("%016x", model.fingerprint)) {
    return Bad(
        absl::StrFormat("it belongs to another model (its fingerprint is not this model's %016x)",
                        model.fingerprint));
  }
  const std::optional<int64_t> position = IntField(j, "position"), pending = IntField(j, "pending");
  if (!position || !pending) return Bad("the header lacks an integer position or pending token");
  RETURN_IF_ERROR(CheckScalars(model, *position, *pending));
  const int64_t kv_tokens = kv_per_token > 0 ? *position : 0;
  if (kv_per_token > 0 && rest - slot_total != kv_tokens * kv_per_token) {
    return Bad(absl::StrCat("it holds ", rest - slot_total, " KV bytes; position ", *position,
                            " needs ", kv_tokens * kv_per_token));
  }
  const std::vector<Section> sections = Sections(model, kv_tokens);
  const auto table = j.find("sections");  // no copy of the table
  static const Json kNone;
  RETURN_IF_ERROR(CheckSectionTable(table != j.end() ? *table : kNone, sections));
  StateSnapshot s;
  s.state.position = *position;
  if (*pending >= 0) s.pending = static_cast<int32_t>(*pending);
  RETURN_IF_ERROR(ReadMeta(j, &s));
  RETURN_IF_ERROR(ReadTextTail(j, model.vocab_size, &s));
  const uint8_t* data = reinterpret_cast<const uint8_t*>(blob.data()) + payload;
  RETURN_IF_ERROR(CheckFinite(sections, data));
  RETURN_IF_ERROR(FillState(sections, data, kv_tokens, &s.state));
  return s;
}

}  // namespace linfer
