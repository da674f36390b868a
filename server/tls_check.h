// A TLS certificate and key checked before the server listens with them: gRPC refuses a bad pair
// only by failing to listen, which reads as a port problem. And a client's root certificates.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace linfer {

// InvalidArgument naming the file when `cert_pem` holds no PEM certificate, `key_pem` no
// (unencrypted) PEM private key, or the key is not the certificate's.
absl::Status CheckTlsKeyPair(const std::string& cert_path, const std::string& cert_pem,
                             const std::string& key_path, const std::string& key_pem);

// InvalidArgument naming `flag` and `path` when `pem` holds no PEM certificate (a client's root
// certificates: gRPC would only fail every call, with "empty address list").
absl::Status CheckPemCertificates(const std::string& flag, const std::string& path,
                                  const std::string& pem);

}  // namespace linfer
