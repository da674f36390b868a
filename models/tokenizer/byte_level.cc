// The GPT-2 byte <-> character table (see byte_level.h).
#include "models/tokenizer/byte_level.h"

#include <array>

#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

struct Tables {
  Tables() {
    char_of.fill(0);
    byte_of.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      char_of[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      byte_of[char_of[b]] = b;
    }
    for (int b = 0; b < 256; ++b) {
      std::string s;
      AppendUtf8(char_of[b], &s);
      utf8_of[b] = s;
    }
  }
  std::array<char32_t, 256> char_of;
  std::array<int, 512> byte_of;
  std::array<std::string, 256> utf8_of;
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return GetTables().char_of[b]; }

int CharToByte(char32_t c) { return c < 512 ? GetTables().byte_of[c] : -1; }

std::string ByteLevelEncode(absl::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out.append(t.utf8_of[b]);
  return out;
}

void ByteLevelDecodeToken(absl::string_view token, std::string* out) {
  const size_t start = out->size();
  for (size_t i = 0; i < token.size();) {
    int len = 0;
    const char32_t c = DecodeUtf8(token, i, &len);
    const int b = CharToByte(c);
    if (b < 0) {
      out->resize(start);
      out->append(token.data(), token.size());
      return;
    }
    out->push_back(static_cast<char>(b));
    i += len;
  }
}

}  // namespace linfer::tokenizer
