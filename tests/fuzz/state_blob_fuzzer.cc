// Fuzz target: session state blobs (import and the disk tier) through DecodeStateBlob, for a
// fixed small model description. What it accepts must re-encode and decode to the same state.
// Inputs whose last byte is even get a correct checksum first.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/crc32.h"
#include "engine/state_blob.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Two layers: a GDN-like one (recurrent + conv) and a linear-attention one with a bf16 state.
const std::vector<linfer::LayerStateSpecs>& Specs() {
  static const auto* specs = new std::vector<linfer::LayerStateSpecs>{
      {{"recurrent", {2, 4, 4}}, {"conv_q", {8, 3}}},
      {{"recurrent", {1, 4, 2}, linfer::DType::kBF16}, {"normalizer", {1, 4}}}};
  return *specs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  const linfer::BlobModel model{0x0123456789abcdefull, &Specs(), 100, int64_t{1} << 40};
  // Half the inputs get their checksum made right, so that mutations reach the header's JSON
  // and the sections behind the CRC check (a deep header crashed the server there).
  std::string fixed(reinterpret_cast<const char*>(data), size);
  if (size >= 20 && (data[size - 1] & 1) == 0) {
    const uint32_t crc = linfer::Crc32(absl::string_view(fixed).substr(0, size - 4));
    std::memcpy(fixed.data() + size - 4, &crc, 4);
  }
  const absl::string_view blob(fixed);
  absl::StatusOr<linfer::StateSnapshot> s = linfer::DecodeStateBlob(blob, model);
  if (!s.ok()) {
    Require(!s.status().message().empty(), "an error without a message");
    return 0;
  }
  Require(s->state.position >= 0 && s->state.position <= model.max_position, "position bound");
  Require(!s->pending || (*s->pending >= 0 && *s->pending < model.vocab_size), "pending bound");
  Require(static_cast<int64_t>(s->state.bytes.size()) == linfer::SlotStateBytes(Specs()),
          "state size");
  absl::StatusOr<std::string> again = linfer::EncodeStateBlob(model, *s);
  Require(again.ok(), "a decoded state re-encodes");
  absl::StatusOr<linfer::StateSnapshot> t = linfer::DecodeStateBlob(*again, model);
  Require(t.ok(), "a re-encoded blob decodes");
  Require(t->state.bytes == s->state.bytes && t->state.position == s->state.position &&
              t->pending == s->pending,
          "a re-encoded blob holds the same state");
  return 0;
}
