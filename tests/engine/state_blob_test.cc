// State blobs hold every section in f32, whatever the state's dtype in memory: a session with bf16
// recurrent states (CUDA, --state_dtype bf16) exports a blob that an f32-state server imports, and
// back, exactly (a bf16 value widens to f32 without rounding); an f32 value beyond bf16's range
// is refused by name; a host state of the wrong size is an Internal error, not a bad blob.
#include "engine/state_blob.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/crc32.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

std::vector<LayerStateSpecs> Specs(DType recurrent) {
  return {{{"recurrent", {2, 4, 4}, recurrent}, {"conv_q", {8, 3}}}};
}

TEST(StateBlobTest, Bf16StatesTravelAsF32BothWays) {
  const std::vector<LayerStateSpecs> bf16 = Specs(DType::kBF16), f32 = Specs(DType::kF32);
  const BlobModel on_bf16{7, &bf16, 100}, on_f32{7, &f32, 100};
  StateSnapshot snap;
  snap.state.position = 12;
  snap.pending = 3;
  snap.text_tail = {5, 0, 99};
  snap.state.bytes.resize(32 * 2 + 24 * 4);
  std::vector<float> want;
  for (int i = 0; i < 32; ++i) {
    const uint16_t v = F32ToBf16(0.37f * static_cast<float>(i - 16));
    std::memcpy(snap.state.bytes.data() + 2 * i, &v, 2);
    want.push_back(Bf16ToF32(v));
  }
  for (int i = 0; i < 24; ++i) {
    const float v = 0.01f * static_cast<float>(i);
    std::memcpy(snap.state.bytes.data() + 64 + 4 * i, &v, 4);
    want.push_back(v);
  }
  absl::StatusOr<std::string> blob = EncodeStateBlob(on_bf16, snap);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_NE(blob->find("\"dtype\":\"F32\""), std::string::npos);
  EXPECT_EQ(blob->find("BF16"), std::string::npos);
  // Into an f32-state server: the widened values.
  absl::StatusOr<StateSnapshot> wide = DecodeStateBlob(*blob, on_f32);
  ASSERT_TRUE(wide.ok()) << wide.status();
  ASSERT_EQ(wide->state.bytes.size(), 56u * 4);
  std::vector<float> got(56);
  std::memcpy(got.data(), wide->state.bytes.data(), 56 * 4);
  EXPECT_EQ(got, want);
  EXPECT_EQ(wide->state.position, 12);
  EXPECT_EQ(wide->pending, 3);
  EXPECT_EQ(wide->text_tail, snap.text_tail);
  // And back: the f32 server's export into the bf16 server gives the original bits.
  absl::StatusOr<std::string> back = EncodeStateBlob(on_f32, *wide);
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<StateSnapshot> narrow = DecodeStateBlob(*back, on_bf16);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_EQ(narrow->state.bytes, snap.state.bytes);
  // A value bf16 cannot hold is refused, naming the section.
  StateSnapshot huge = *wide;
  const float big = 3.4e38f;
  std::memcpy(huge.state.bytes.data(), &big, 4);
  absl::StatusOr<std::string> huge_blob = EncodeStateBlob(on_f32, huge);
  ASSERT_TRUE(huge_blob.ok());
  absl::Status st = DecodeStateBlob(*huge_blob, on_bf16).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("layers.0.recurrent"), std::string::npos) << st;
  EXPECT_NE(st.message().find("BF16"), std::string::npos) << st;
  // A host state of another size is a bug on this side: Internal.
  StateSnapshot short_state = snap;
  short_state.state.bytes.resize(10);
  EXPECT_EQ(EncodeStateBlob(on_bf16, short_state).status().code(), absl::StatusCode::kInternal);
}

// `blob` with its JSON header replaced by `header` (lengths, alignment and checksum redone).
std::string WithHeader(const std::string& blob, const std::string& header) {
  uint32_t old_bytes = 0;
  std::memcpy(&old_bytes, blob.data() + 12, 4);
  const size_t old_payload = (16 + old_bytes + 7) / 8 * 8;
  std::string out = blob.substr(0, 12);
  const uint32_t n = static_cast<uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out += header;
  out.resize((out.size() + 7) / 8 * 8, '\0');
  out += blob.substr(old_payload, blob.size() - 4 - old_payload);
  const uint32_t crc = Crc32(out);
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}

// A header nesting 100,000 levels, with the right sizes and checksum (what a client can send to
// Sessions/Import): refused by name. Copying its section table recursed once per level and
// overflowed the engine thread's stack, taking the server down.
TEST(StateBlobTest, DeepHeadersAreRefusedNotRecursedInto) {
  const std::vector<LayerStateSpecs> f32 = Specs(DType::kF32);
  const BlobModel model{7, &f32, 100};
  StateSnapshot snap;
  snap.state.position = 1;
  snap.state.bytes.assign(56 * 4, 0);
  absl::StatusOr<std::string> blob = EncodeStateBlob(model, snap);
  ASSERT_TRUE(blob.ok()) << blob.status();
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, blob->data() + 12, 4);
  nlohmann::json header = nlohmann::json::parse(blob->substr(16, header_bytes));
  ASSERT_TRUE(DecodeStateBlob(WithHeader(*blob, header.dump()), model).ok());  // the rebuild
  header.erase("sections");
  std::string deep = header.dump();
  deep.pop_back();
  deep += ",\"sections\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const absl::Status st = DecodeStateBlob(WithHeader(*blob, deep), model).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("the header nests deeper than 8 levels"), std::string::npos) << st;
}

// A session holds its position's tokens and a pending one: a blob whose sum passes the model's
// length is refused by name (it imported, and then every turn failed on the context length).
TEST(StateBlobTest, APendingTokenCountsTowardsTheLength) {
  const std::vector<LayerStateSpecs> f32 = Specs(DType::kF32);
  const BlobModel model{7, &f32, 100, 12};
  auto decode = [&](int64_t position, std::optional<int32_t> pending) {
    StateSnapshot snap;
    snap.state.position = position;
    snap.pending = pending;
    snap.state.bytes.assign(56 * 4, 0);
    absl::StatusOr<std::string> blob = EncodeStateBlob(model, snap);
    EXPECT_TRUE(blob.ok()) << blob.status();
    return blob.ok() ? DecodeStateBlob(*blob, model).status() : blob.status();
  };
  EXPECT_TRUE(decode(12, std::nullopt).ok());
  EXPECT_TRUE(decode(11, 3).ok());
  const absl::Status st = decode(12, 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("position 12 and a pending token make 13 tokens, past 12"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace linfer
