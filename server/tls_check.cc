// CheckTlsKeyPair with OpenSSL (the library gRPC is built on here).
#include "server/tls_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

// OpenSSL's first queued error, as text (the queue is cleared).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block found";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio MemoryBio(const std::string& bytes) {
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// No passphrase prompt (OpenSSL's default reads the terminal): gRPC cannot use an encrypted key.
int NoPassphrase(char*, int, int, void*) { return 0; }

}  // namespace

absl::Status CheckTlsKeyPair(const std::string& cert_path, const std::string& cert_pem,
                             const std::string& key_path, const std::string& key_pem) {
  ERR_clear_error();
  Bio cert_bio = MemoryBio(cert_pem);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr) : nullptr,
      X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert ", cert_path, ": not a PEM certificate (", OpenSslError(), ")"));
  }
  Bio key_bio = MemoryBio(key_pem);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr) : nullptr,
      EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key ", key_path, ": not an unencrypted PEM private key (", OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key ", key_path,
                                                   " is not the key of the certificate in "
                                                   "--tls_cert ",
                                                   cert_path));
  }
  return absl::OkStatus();
}

absl::Status CheckPemCertificates(const std::string& flag, const std::string& path,
                                  const std::string& pem) {
  ERR_clear_error();
  Bio bio = MemoryBio(pem);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr, X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM certificate (", OpenSslError(), ")"));
  }
  ERR_clear_error();
  return absl::OkStatus();
}

}  // namespace linfer
