// Safetensors headers parsed from memory: sizes and offsets whose arithmetic would overflow are
// refused, so every tensor view handed out lies inside the data buffer.
#include "models/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace linfer {
namespace {

// A file: 8-byte little-endian header length, the header, then `data`.
std::string File(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(uint64_t{header.size()} >> (8 * i)));
  return out + header + data;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const std::string& header,
                                                       const std::string& data) {
  return SafetensorsFile::FromBuffer(File(header, data), "mem.safetensors");
}

TEST(SafetensorsTest, ViewsOfAValidBuffer) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
      Parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("z":{"dtype":"F16","shape":[0,7],"data_offsets":[8,8]}})",
            std::string(8, '\0'));
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<TensorView> a = (*f)->View("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->nbytes(), 8u);
  absl::StatusOr<TensorView> z = (*f)->View("z");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->numel(), 0);
}

void ExpectBad(const std::string& header, const std::string& data, const std::string& needle) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = Parse(header, data);
  ASSERT_FALSE(f.ok()) << "accepted: " << header;
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("mem.safetensors"), std::string::npos) << f.status();
}

TEST(SafetensorsTest, ElementCountTimesSizeMustNotWrap) {
  // 2^62 F64 elements are 2^65 bytes: the product used to wrap to 0 and match [0, 0], and the
  // view then claimed 2^65 bytes of an empty buffer.
  ExpectBad(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", "",
            "too large");
  ExpectBad(R"({"a":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", "",
            "too large");
}

TEST(SafetensorsTest, DimensionsFitInt64EvenWhenTheTensorIsEmpty) {
  // A zero dimension made the element count 0, so any other dimension passed; 2^64-1 became the
  // int64 dimension -1 (a negative byte count), 2^62 x 2^62 overflowed stride arithmetic.
  ExpectBad(R"({"a":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", "",
            "too large");
  ExpectBad(
      R"({"a":{"dtype":"U8","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})",
      "", "too large");
}

TEST(SafetensorsTest, HeaderLengthAndOffsets) {
  std::string huge_len = File("{}", "");
  huge_len[7] = '\x7f';  // header length ~2^63
  EXPECT_FALSE(SafetensorsFile::FromBuffer(huge_len, "mem.safetensors").ok());
  EXPECT_FALSE(SafetensorsFile::FromBuffer("1234567", "mem.safetensors").ok());
  ExpectBad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", "x",
            "past the end");
  ExpectBad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0.0,1]}})", "x", "non-negative");
  // A header past the safetensors library's 100 MB, in a file that holds it: the limit is named
  // (it was blamed on the file's size).
  ExpectBad("{}" + std::string(100000000 - 1, ' '), "", "header of 100000001 bytes is larger than");
  EXPECT_TRUE(Parse("{}" + std::string(100000000 - 2, ' '), "").ok());
}

}  // namespace
}  // namespace linfer
