// API keys: `authorization: Bearer <key>` metadata checked against a keys file. A key's owner
// name scopes its sessions. Without a keys file every caller is the anonymous owner "".
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class CallbackServerContext;
}

namespace linfer {

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: authentication off
  // One key per line, optionally followed by whitespace and an owner name; '#' starts a comment.
  // Keys without a name are their own owner (never logged or returned).
  static absl::StatusOr<ApiKeys> FromFile(const std::string& path);

  bool enabled() const { return !owners_.empty(); }
  // The owner for `authorization` metadata ("Bearer <key>"), or Unauthenticated.
  absl::StatusOr<std::string> OwnerFor(absl::string_view authorization) const;
  absl::StatusOr<std::string> Authenticate(const grpc::CallbackServerContext* context) const;

 private:
  std::map<std::string, std::string, std::less<>> owners_;  // key → owner
};

}  // namespace linfer
