// ApiKeys: keys file parsing and bearer-token checks.
#include "server/auth.h"

#include <grpcpp/server_context.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"

namespace linfer {
namespace {

constexpr int64_t kMaxKeysFileBytes = int64_t{64} << 20;

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::FromFile(const std::string& path) {
  absl::StatusOr<std::string> file = ReadFile(path, kMaxKeysFileBytes, FileKinds::kAlsoStreams);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("API keys file: ", file.status().message()));
  }
  ApiKeys keys;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*file, '\n')) {
    ++number;
    const absl::string_view content = line.substr(0, line.find('#'));
    absl::string_view text = absl::StripAsciiWhitespace(content);
    if (text.empty()) continue;
    std::vector<std::string> parts =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (parts.size() > 2 || parts[0].size() < 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": expected 'KEY [OWNER]' with a key of at least 8 characters"));
    }
    const std::string owner = parts.size() == 2 ? parts[1] : absl::StrCat("key:", parts[0]);
    keys.owners_[parts[0]] = owner;
  }
  if (keys.owners_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("API keys file ", path, " has no keys"));
  }
  return keys;
}

absl::StatusOr<std::string> ApiKeys::OwnerFor(absl::string_view authorization) const {
  if (!enabled()) return std::string();
  const absl::string_view value = absl::StripAsciiWhitespace(authorization);
  if (value.empty()) {
    return absl::UnauthenticatedError(
        "no API key: send the header (gRPC: metadata) 'authorization: Bearer <API key>'");
  }
  // The scheme is case-insensitive (RFC 9110 §11.1), then spaces or tabs, then the key.
  const size_t gap = value.find_first_of(" \t");
  if (gap == absl::string_view::npos || !absl::EqualsIgnoreCase(value.substr(0, gap), "bearer")) {
    return absl::UnauthenticatedError(
        "the authorization is not 'Bearer <API key>' (another scheme, or no key after it)");
  }
  auto it = owners_.find(absl::StripAsciiWhitespace(value.substr(gap)));
  if (it == owners_.end()) return absl::UnauthenticatedError("invalid API key");
  return it->second;
}

absl::StatusOr<std::string> ApiKeys::Authenticate(
    const grpc::CallbackServerContext* context) const {
  if (!enabled()) return std::string();
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return OwnerFor("");
  return OwnerFor(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace linfer
